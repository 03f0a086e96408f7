"""Tool-call parsing: Hermes JSON, Qwen3 (reasoning + JSON or XML bodies), whole and streamed."""

from __future__ import annotations

import json

import pytest

from tackroom import ConfigError
from tackroom_gateway.tool_parsers import get_tool_parser


def test_hermes_single_call_with_model_whitespace():
    text = '<tool_call>\n{"name": "get_weather", "arguments": { "city": "Paris" }}\n</tool_call>'
    out = get_tool_parser("hermes").parse(text)
    assert out.content is None
    assert [(c.name, json.loads(c.arguments)) for c in out.tool_calls] == [("get_weather", {"city": "Paris"})]


def test_hermes_text_then_two_calls():
    text = (
        "Let me check both.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"b\", \"parameters\": {\"y\": \"é\"}}\n</tool_call>"
    )
    out = get_tool_parser("hermes").parse(text)
    assert out.content == "Let me check both."
    assert [c.name for c in out.tool_calls] == ["a", "b"]
    assert json.loads(out.tool_calls[1].arguments) == {"y": "é"}
    assert len({c.id for c in out.tool_calls}) == 2


def test_unparsable_call_stays_in_content_and_is_counted():
    text = '<tool_call>\n{"name": "a", "arguments": {"x": \n</tool_call>'
    out = get_tool_parser("hermes").parse(text)
    assert out.tool_calls == []
    assert out.content == text
    assert out.parse_failures == 1


def test_unclosed_final_call_is_parsed():
    out = get_tool_parser("hermes").parse('<tool_call>\n{"name": "a", "arguments": {}}\n')
    assert [c.name for c in out.tool_calls] == ["a"]


def test_tool_choice_none_leaves_text_alone():
    text = '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>'
    assert get_tool_parser("hermes").parse(text, parse_tools=False).content == text


def test_qwen3_reasoning_and_json_call():
    text = '<think>\nNeed the weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    out = get_tool_parser("qwen3").parse(text)
    assert out.reasoning == "Need the weather."
    assert out.content is None
    assert out.tool_calls[0].name == "get_weather"


def test_qwen3_coder_xml_call():
    text = (
        "<tool_call>\n<function=run_shell>\n<parameter=command>\nls -la /tmp\n</parameter>\n"
        "<parameter=timeout>\n30\n</parameter>\n</function>\n</tool_call>"
    )
    out = get_tool_parser("qwen3").parse(text)
    assert out.tool_calls[0].name == "run_shell"
    assert json.loads(out.tool_calls[0].arguments) == {"command": "ls -la /tmp", "timeout": 30}


def test_unknown_parser_lists_choices():
    with pytest.raises(ConfigError, match="hermes, qwen3"):
        get_tool_parser("nope")


CASES = [
    ("hermes", "Plain answer with a < sign and <tool but no call."),
    ("hermes", 'Sure.\n<tool_call>\n{"name": "f", "arguments": {"q": "<tool_call>"}}\n</tool_call>'),
    ("hermes", '<tool_call>\n{"name": "f", "arguments": {broken}\n</tool_call> and text after'),
    ("qwen3", "<think>\nhmm </thi nk> ok\n</think>\n\nThe answer is 4."),
    ("qwen3", '<think>\nplan\n</think>\n\nCalling.\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'),
    ("qwen3", "<think>\ncut off while thinking"),
    ("qwen3", "No reasoning at all, just text."),
]


@pytest.mark.parametrize(("parser", "text"), CASES)
def test_streaming_matches_whole_parse_at_every_split(parser, text):
    p = get_tool_parser(parser)
    whole = p.parse(text)
    for size in (1, 2, 3, 7, len(text)):
        s = p.stream()
        content, reasoning = "", ""
        for i in range(0, len(text), size):
            d = s.feed(text[i : i + size])
            content, reasoning = content + d.content, reasoning + d.reasoning
        owed, final = s.finish()
        content, reasoning = content + owed.content, reasoning + owed.reasoning
        assert [(c.name, c.arguments) for c in final.tool_calls] == [(c.name, c.arguments) for c in whole.tool_calls]
        assert reasoning == (whole.reasoning or "")
        if whole.tool_calls:
            assert content.strip() == (whole.content or "")
        else:
            assert content == (whole.content or ""), size
