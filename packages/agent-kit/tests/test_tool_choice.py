"""``[harness] tool_choice = "required"``: the relay sets each dialect's own tool choice, and the real gateway then
samples the call under the tools' grammar; without it, or where a call asks for no tool, the call passes as sent."""

from __future__ import annotations

import json

import httpx
import pytest

from tackroom_agent_kit import ModelRelay, require_tool_call, with_tool_choice
from tackroom_agent_kit.testing import ScriptedEngineForTests, scripted_gateway, tool_call
from tackroom_gateway import load_tokenizer

READ = {"name": "read", "description": "Read a file", "parameters": {
    "type": "object", "properties": {"filePath": {"type": "string"}}, "required": ["filePath"]}}

CALLS = {
    "chat": ("/v1/chat/completions", {"model": "m", "max_tokens": 32, "messages": [{"role": "user", "content": "hi"}],
                                      "tools": [{"type": "function", "function": READ}]}),
    "responses": ("/v1/responses", {"model": "m", "max_output_tokens": 32, "input": "hi",
                                    "tools": [{"type": "function", **READ}]}),
    "messages": ("/v1/messages", {"model": "m", "max_tokens": 32, "messages": [{"role": "user", "content": "hi"}],
                                  "tools": [{"name": "read", "description": "Read a file",
                                             "input_schema": READ["parameters"]}]}),
    "gemini": ("/v1beta/models/m:generateContent", {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}], "generationConfig": {"maxOutputTokens": 32},
        "tools": [{"functionDeclarations": [{"name": "read", "description": "Read a file",
                                             "parameters": READ["parameters"]}]}]}),
}


@pytest.fixture(scope="module")
def smollm2():
    return load_tokenizer("smollm2")


def grammar(body: dict) -> dict | None:
    """The structural tag the gateway sent the engine, parsed (None: the turn was sampled freely)."""
    tag = (body.get("structured_outputs") or {}).get("structural_tag")
    return json.loads(tag) if tag else None


@pytest.mark.parametrize("dialect", sorted(CALLS))
@pytest.mark.parametrize("choice", ["auto", "required"])
async def test_required_reaches_the_engine_as_the_tools_grammar_in_every_dialect(smollm2, dialect, choice):
    engine = ScriptedEngineForTests(smollm2, default=tool_call("read", filePath="/workspace/a.txt"))
    path, body = CALLS[dialect]
    async with scripted_gateway(engine) as gateway:
        policy = gateway.policy(f"tool-choice-{dialect}-{choice}")
        async with ModelRelay(policy.base_url, max_calls=None, fill=with_tool_choice(None, choice)) as relay, \
                httpx.AsyncClient(base_url=relay.root_url, timeout=30) as client:
            r = await client.post(path, json=body)
    assert r.status_code == 200, r.text
    (sent,) = engine.bodies
    if choice == "auto":
        assert grammar(sent) is None
        return
    tag = grammar(sent)
    assert tag is not None, sent
    fmt = json.dumps(tag)
    assert '\\"name\\": \\"read\\"' in fmt and '"filePath"' in fmt  # one call to `read`, its arguments its schema


def test_a_call_that_asks_for_no_tool_or_a_named_one_passes_as_sent():
    chat = {"messages": [], "tools": [{"type": "function", "function": READ}]}
    assert require_tool_call("v1/chat/completions", chat)["tool_choice"] == "required"
    for kept in ("none", {"type": "function", "function": {"name": "read"}}):
        assert require_tool_call("v1/chat/completions", {**chat, "tool_choice": kept})["tool_choice"] == kept
    assert require_tool_call("v1/chat/completions", {"messages": []}) == {"messages": []}  # no tools offered
    msgs = {"messages": [], "tools": [{"name": "read"}], "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}
    assert require_tool_call("v1/messages", msgs)["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    for kept in ({"type": "none"}, {"type": "tool", "name": "read"}):
        assert require_tool_call("v1/messages", {**msgs, "tool_choice": kept})["tool_choice"] == kept
    gem = {"contents": [], "tools": [{"functionDeclarations": [{"name": "read"}]}],
           "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}, "retrievalConfig": {"x": 1}}}
    assert require_tool_call("v1beta/models/m:streamGenerateContent", gem)["toolConfig"] == {
        "functionCallingConfig": {"mode": "ANY"}, "retrievalConfig": {"x": 1}}
    none = {**gem, "toolConfig": {"functionCallingConfig": {"mode": "NONE"}}}
    assert require_tool_call("v1beta/models/m:generateContent", none) == none
    assert require_tool_call("v1/completions", {"prompt": "x", "tools": [READ]}) == {"prompt": "x", "tools": [READ]}


def test_the_harness_own_fill_runs_first():
    def sampling(path: str, doc: dict) -> dict:
        return {**doc, "temperature": 0.5}

    fill = with_tool_choice(sampling, "required")
    out = fill("v1/responses", {"input": "hi", "tools": [{"type": "function", **READ}]})
    assert out["temperature"] == 0.5 and out["tool_choice"] == "required"
    assert with_tool_choice(sampling, "auto") is sampling and with_tool_choice(None, "auto") is None
