"""The fixed-base continuation render equals a full render whenever the model's text is canonical."""

from __future__ import annotations

import base64
import json

import pytest

from tackroom_gateway.chat_template import ChatTemplate, ChatTemplateError

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
]


def _call(name: str, args: dict) -> tuple[str, dict]:
    """The assistant text the template renders for a call, and the OpenAI message for it."""
    text = '<tool_call>\n{"name": "' + name + '", "arguments": ' + json.dumps(args, ensure_ascii=False) + "}\n</tool_call>"
    msg = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}
    return text, msg


def _conversation():
    """(new messages before each assistant turn, the assistant's canonical text, its message)."""
    t1, m1 = _call("read_file", {"path": "notes/é.txt"})
    return [
        ([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Read notes/é.txt"}], t1, m1),
        ([{"role": "tool", "tool_call_id": "c1", "content": "line one\n  line two\t\n\n"}], "It has two lines.", {"role": "assistant", "content": "It has two lines."}),
        ([{"role": "user", "content": "   and now?  "}], "Nothing else.", {"role": "assistant", "content": "Nothing else."}),
    ]


@pytest.mark.parametrize("which", ["smollm2", "qwen3"])
def test_continuation_equals_full_render_for_canonical_text(which, request):
    tmpl = ChatTemplate(request.getfixturevalue(f"{which}_tokenizer"))
    assert tmpl.end_of_turn_id is not None
    history: list[dict] = []
    prompt: list[int] = []
    completion: list[int] = []
    for k, (new, text, reply) in enumerate(_conversation()):
        if k == 0:
            prompt = tmpl.render_ids(new, tools=TOOLS)
        else:
            prompt = prompt + completion + tmpl.continuation_ids(new, closed=True, tools=TOOLS)
        history += new
        assert prompt == tmpl.render_ids(history, tools=TOOLS), f"turn {k}"
        completion = tmpl.encode(text) + [tmpl.end_of_turn_id]
        history.append(reply)


@pytest.mark.parametrize("which", ["smollm2", "qwen3"])
def test_unclosed_completion_gets_the_whole_closing(which, request):
    tmpl = ChatTemplate(request.getfixturevalue(f"{which}_tokenizer"))
    new = [{"role": "user", "content": "go on"}]
    closed = tmpl.continuation_text(new, closed=True)
    cut = tmpl.continuation_text(new, closed=False)
    assert cut == tmpl.end_of_turn_text + closed
    assert closed.startswith("\n<|im_start|>user\ngo on<|im_end|>\n<|im_start|>assistant\n")


def test_smollm2_template_renders_tools_and_tool_results(smollm2_tokenizer):
    tmpl = ChatTemplate(smollm2_tokenizer)
    text = tmpl.render(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a"}'}}]},
            {"role": "tool", "tool_call_id": "1", "content": "A"},
            {"role": "tool", "tool_call_id": "2", "content": "B"},
        ],
        tools=TOOLS,
    )
    assert '<tools>\n{"type": "function", "function": {"name": "read_file"' in text
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a"}}\n</tool_call><|im_end|>' in text
    assert "<|im_start|>user\n<tool_response>\nA\n</tool_response>\n<tool_response>\nB\n</tool_response><|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_tokenizer_without_template_is_a_clear_error(smollm2_tokenizer):
    import copy

    tok = copy.deepcopy(smollm2_tokenizer)
    tok.chat_template = None
    with pytest.raises(ChatTemplateError, match="has no chat template"):
        ChatTemplate(tok)


@pytest.mark.parametrize("which", ["smollm2", "qwen3"])
def test_fast_encode_equals_the_tokenizers_own(which, request):
    tok = request.getfixturevalue(f"{which}_tokenizer")
    tmpl = ChatTemplate(tok)
    assert tmpl._backend is not None
    for text in ["<|im_start|>user\n  héllo\t wörld 12345 🚀<|im_end|>\n", "<tool_call>\n{\"a\": 1}\n</tool_call>", "  ", "日本語\r\n"]:
        assert tmpl.encode(text) == tok.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("which", ["smollm2", "qwen3"])
def test_image_parts_render_as_a_placeholder_the_tokens_record(which, request):
    # A text-only token path cannot carry pixels: the image is described (type, size), never spelled out.
    tmpl = ChatTemplate(request.getfixturevalue(f"{which}_tokenizer"))
    data = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(3000)).decode()
    msg = {"role": "user", "content": [{"type": "text", "text": "Here it is: "},
                                       {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}]}
    text = tmpl.render([{"role": "system", "content": "s"}, msg])
    assert "Here it is: [image image/png, 3,008 bytes: not shown, this model reads text only]" in text
    assert data[:40] not in text
    # The continuation render (what the gateway and the harness append) says the same.
    cont = tmpl.continuation_text([msg], closed=True)
    assert "[image image/png, 3,008 bytes: not shown" in cont


def test_malformed_and_remote_image_parts_do_not_break_rendering(smollm2_tokenizer):
    from tackroom_gateway import image_placeholder

    tmpl = ChatTemplate(smollm2_tokenizer)
    parts = [{"type": "image_url", "image_url": None}, {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}},
             {"type": "input_audio", "input_audio": {"data": "AAAA"}}, 7]
    text = tmpl.render([{"role": "user", "content": parts}])
    assert "[image no url: not shown" in text and "[image https://x.test/a.png: not shown" in text
    assert "AAAA" not in text
    assert image_placeholder({"type": "image_url", "image_url": "data:image/gif,GIF89a"}).startswith("[image image/gif, 6 bytes")
