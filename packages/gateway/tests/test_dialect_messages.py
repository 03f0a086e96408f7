"""Anthropic's Messages API through the gateway, called by Anthropic's own Python client (``anthropic``).

The engine is FakeEngineForTests (exact, chosen completion ids and failures on demand; see its docstring), except
in the last test, which runs the same conversation against the real local vLLM (marked ``engine``).
"""

from __future__ import annotations

import asyncio
import json

import anthropic
import httpx
import pytest
from fake_engine import Scripted, gateway_over_fake

from tackroom import InfraError
from tackroom_gateway import build_gateway

TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
    {"name": "get_time", "input_schema": {"type": "object", "properties": {}}},
]
SYSTEM = [{"type": "text", "text": "You answer briefly.", "cache_control": {"type": "ephemeral"}}]
MODEL = "claude-sonnet-4-5"


OPENED: list = []
"""The vendor clients a test made: closed after it (left to the garbage collector, their HTTP pools close on a loop
that has ended, and the error lands in whatever test runs next on the worker)."""


def opened(client):
    OPENED.append(client)
    return client


@pytest.fixture(autouse=True)
async def _close_the_clients():
    yield
    while OPENED:
        await OPENED.pop().close()


def client(gw, sid: str) -> anthropic.AsyncAnthropic:
    """Anthropic's client on a session's root (``/sessions/{id}/{token}``): it appends ``/v1/messages`` itself."""
    return opened(anthropic.AsyncAnthropic(base_url=gw.session_base_url(sid).removesuffix("/v1"),
                                           api_key="any: the token is in the URL", max_retries=0, timeout=30))


def call_text(name: str, args: dict) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(args)}}}\n</tool_call>'


def sent_back(message) -> dict:
    """An assistant turn as a client sends it back: the blocks it was given, as JSON."""
    return {"role": "assistant", "content": [b.to_dict() for b in message.content]}


def one_branch(session) -> None:
    turns = session.turns
    assert [t.branch for t in turns] == [0] * len(turns) and session.notes == []
    for prev, cur in zip(turns, turns[1:]):
        assert cur.parent == prev.index
        assert cur.prompt_ids[: len(prev.prompt_ids) + len(prev.completion_ids)] == prev.prompt_ids + prev.completion_ids


async def raw_events(url: str, body: dict) -> list[tuple[str, dict]]:
    out = []
    async with httpx.AsyncClient(timeout=30) as c, c.stream("POST", url, json={**body, "stream": True}) as r:
        assert r.status_code == 200, await r.aread()
        assert r.headers["content-type"].startswith("text/event-stream")
        name = None
        async for line in r.aiter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                out.append((name, json.loads(line[6:])))
    return out


async def test_a_tool_conversation_extends_one_branch(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw):
        c = client(gw, "t")
        first = fake.push_text("Checking.\n" + call_text("get_weather", {"city": "Lyon"}))
        messages: list[dict] = [{"role": "user", "content": "Weather in Lyon?"}]
        r1 = await c.messages.create(model=MODEL, max_tokens=64, system=SYSTEM, tools=TOOLS, messages=messages,
                                     metadata={"user_id": "user_abc"})
        text, use = r1.content
        assert r1.stop_reason == "tool_use" and r1.stop_sequence is None and r1.id.startswith("msg_")
        assert text.type == "text" and text.text.strip() == "Checking."
        assert use.type == "tool_use" and use.name == "get_weather" and use.input == {"city": "Lyon"}
        # the tool result comes back in the client's own shape, with more user text in the same message
        messages += [sent_back(r1), {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": use.id, "content": [{"type": "text", "text": "Sunny, 22 °C"}]},
            {"type": "text", "text": "And the time?"}]}]
        fake.push_text(call_text("get_time", {}))
        async with c.messages.stream(model=MODEL, max_tokens=64, system=SYSTEM, tools=TOOLS, messages=messages) as s:
            r2 = await s.get_final_message()
        assert r2.stop_reason == "tool_use" and [b.type for b in r2.content] == ["tool_use"]
        assert r2.content[0].name == "get_time" and r2.content[0].input == {}
        messages += [sent_back(r2), {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": r2.content[0].id, "content": "no clock here", "is_error": True}]}]
        fake.push_text("It is sunny in Lyon.")
        r3 = await c.messages.create(model=MODEL, max_tokens=64, system=SYSTEM, tools=TOOLS, messages=messages)
        assert r3.stop_reason == "end_turn" and [b.to_dict() for b in r3.content] == [{"type": "text", "text": "It is sunny in Lyon."}]
        session = gw.sessions["t"]
    one_branch(session)
    turns = session.turns
    assert len(turns) == 3 and turns[0].completion_ids == first
    # what the model read: the tool result as its template renders one, then the user's text; the error flagged
    new = tok.decode(turns[1].prompt_ids[len(turns[0].prompt_ids) + len(turns[0].completion_ids):])
    assert "<tool_response>\nSunny, 22 °C\n</tool_response><|im_end|>\n<|im_start|>user\nAnd the time?" in new
    assert "Error: no clock here" in tok.decode(turns[2].prompt_ids)
    assert tok.decode(turns[0].prompt_ids).startswith("<|im_start|>system\nYou answer briefly.\n\n# Tools")
    for r, t in zip((r1, r2, r3), turns):
        assert (r.usage.input_tokens, r.usage.output_tokens) == (len(t.prompt_ids), len(t.completion_ids))


async def test_streamed_events_have_anthropics_shapes_and_agree_with_the_plain_answer(smollm2_tokenizer):
    tok = smollm2_tokenizer
    reply = "  Let me look.\n" + call_text("get_weather", {"city": "Oslo"}) + "\n" + call_text("get_time", {})
    async with gateway_over_fake(tok) as (fake, gw):
        body = {"model": MODEL, "max_tokens": 64, "tools": TOOLS, "messages": [{"role": "user", "content": "Oslo?"}]}
        fake.push_text(reply)
        events = await raw_events(gw.session_base_url("a").removesuffix("/v1") + "/v1/messages", body)
        fake.push_text(reply)
        plain = await client(gw, "b").messages.create(**body)
        fake.push_text(reply)
        async with client(gw, "c").messages.stream(**body) as s:
            streamed = await s.get_final_message()
    assert all(name == data["type"] for name, data in events)
    names = [name for k, (name, _) in enumerate(events) if k == 0 or name != events[k - 1][0]]  # runs of deltas as one
    assert names == ["message_start", "ping",
                     "content_block_start", "content_block_delta", "content_block_stop",
                     "content_block_start", "content_block_delta", "content_block_stop",
                     "content_block_start", "content_block_delta", "content_block_stop",
                     "message_delta", "message_stop"]
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["usage"]["input_tokens"] > 0
    blocks = [d["content_block"] for n, d in events if n == "content_block_start"]
    assert [b["type"] for b in blocks] == ["text", "tool_use", "tool_use"]
    assert blocks[1]["input"] == {} and blocks[1]["name"] == "get_weather" and blocks[1]["id"].startswith("call_")
    deltas = [d for n, d in events if n == "content_block_delta"]
    text = "".join(d["delta"]["text"] for d in deltas if d["index"] == 0 and d["delta"]["type"] == "text_delta")
    assert text == "Let me look."  # a text block is the reply's text stripped, streamed or not
    json_deltas = [d for d in deltas if d["index"] == 1]
    assert len(json_deltas) == 1 and json_deltas[0]["delta"]["type"] == "input_json_delta"
    assert json.loads(json_deltas[0]["delta"]["partial_json"]) == {"city": "Oslo"}
    assert [d["delta"]["partial_json"] for d in deltas if d["index"] == 2] == ["{}"]
    end = events[-2][1]
    assert end["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert end["usage"]["output_tokens"] == len(tok.encode(reply, add_special_tokens=False)) + 1
    assert end["usage"]["input_tokens"] == start["usage"]["input_tokens"]
    # the client's own stream accumulator builds the answer the plain call gets (ids aside)
    def shape(m):
        return [{k: v for k, v in b.to_dict().items() if k != "id"} for b in m.content], m.stop_reason, m.usage.to_dict()
    assert shape(streamed) == shape(plain)
    assert [b.type for b in plain.content] == ["text", "tool_use", "tool_use"] and plain.content[0].text.strip() == "Let me look."


async def test_thinking_is_a_thinking_block_and_comes_back_on_the_same_branch(qwen3_tokenizer):
    tok = qwen3_tokenizer
    async with gateway_over_fake(tok) as (fake, gw):
        c = client(gw, "q")
        fake.push_text("<think>\nI need the tool.\n</think>\n\n" + call_text("get_weather", {"city": "Nice"}))
        messages: list[dict] = [{"role": "user", "content": "Nice?"}]
        kw = {"model": MODEL, "max_tokens": 256, "tools": TOOLS, "thinking": {"type": "enabled", "budget_tokens": 128}}
        async with c.messages.stream(messages=messages, **kw) as s:
            kinds = [e.type async for e in s]
            first = await s.get_final_message()
        assert "thinking" in kinds  # the SDK's own event for a thinking_delta
        thinking, use = first.content
        assert thinking.type == "thinking" and thinking.thinking == "I need the tool." and use.input == {"city": "Nice"}
        messages += [sent_back(first), {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": use.id, "content": "Warm"}]}]
        fake.push_text("<think>\nIt is warm.\n</think>\n\nWarm in Nice.")
        second = await c.messages.create(messages=messages, **kw)
        session = gw.sessions["q"]
    assert [b.to_dict() for b in second.content] == [
        {"type": "thinking", "thinking": "It is warm.", "signature": ""}, {"type": "text", "text": "Warm in Nice."}]
    one_branch(session)


async def test_sampling_fields_reach_the_engine_and_a_stop_sequence_is_reported(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw):
        c = client(gw, "s")
        # this client's version takes the sampling fields only as extra body fields; they are part of the API
        kw = {"model": MODEL, "max_tokens": 20, "extra_body": {"temperature": 0.3, "top_p": 0.9, "top_k": 5},
              "stop_sequences": ["END", "STOP"], "messages": [{"role": "user", "content": "count"}]}
        fake.push(Scripted(completion_ids=tok.encode("one two ", add_special_tokens=False), stop_reason="STOP"))
        plain = await c.messages.create(**kw)
        fake.push(Scripted(completion_ids=tok.encode("one two ", add_special_tokens=False), stop_reason="STOP"))
        async with c.messages.stream(**kw) as s:
            streamed = await s.get_final_message()
        fake.push(Scripted(completion_ids=tok.encode("one two three", add_special_tokens=False), finish_reason="length"))
        cut = await c.messages.create(**kw)
        fake.push_text("one.")
        ended = await c.messages.create(**kw)
        fake.push_text('{"n": 2}')
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        shaped = await c.messages.create(model=MODEL, max_tokens=20, messages=[{"role": "user", "content": "n?"}],
                                         output_config={"format": {"type": "json_schema", "schema": schema}})
        sent, formatted = fake.requests[0], fake.requests[-1]
    assert (plain.stop_reason, plain.stop_sequence) == (streamed.stop_reason, streamed.stop_sequence) == ("stop_sequence", "STOP")
    assert (cut.stop_reason, cut.stop_sequence) == ("max_tokens", None)
    assert (ended.stop_reason, ended.stop_sequence) == ("end_turn", None)
    assert formatted["response_format"] == {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
    assert shaped.content[0].text == '{"n": 2}'
    assert {k: sent[k] for k in ("max_tokens", "temperature", "top_p", "top_k", "stop")} == {
        "max_tokens": 20, "temperature": 0.3, "top_p": 0.9, "top_k": 5, "stop": ["END", "STOP"]}


async def test_tool_choice_maps_onto_the_chat_choices(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw):
        c = client(gw, "tc")
        fake.default = lambda prompt: Scripted(completion_ids=tok.encode(call_text("get_time", {}), add_special_tokens=False))
        base = {"model": MODEL, "max_tokens": 32, "tools": TOOLS, "messages": [{"role": "user", "content": "time?"}]}
        await c.messages.create(**base, tool_choice={"type": "tool", "name": "get_time", "disable_parallel_tool_use": True})
        await c.messages.create(**base, tool_choice={"type": "any"})
        await c.messages.create(**base, tool_choice={"type": "auto"})
        none = await c.messages.create(**base, tool_choice={"type": "none"})
        named, anyone, auto, _ = fake.requests
    assert "get_time" in named["structured_outputs"]["structural_tag"]
    assert "get_weather" not in named["structured_outputs"]["structural_tag"]
    assert "get_weather" in anyone["structured_outputs"]["structural_tag"]
    assert "structured_outputs" not in auto
    assert none.stop_reason == "end_turn" and none.content[0].type == "text"  # tools off: the call stays text


async def test_count_tokens_is_the_prompt_the_next_turn_sends(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw):
        c = client(gw, "n")
        messages: list[dict] = [{"role": "user", "content": "Weather in Lyon?"}]
        counted = await c.messages.count_tokens(model=MODEL, system=SYSTEM, tools=TOOLS, messages=messages)
        fake.push_text(call_text("get_weather", {"city": "Lyon"}))
        r1 = await c.messages.create(model=MODEL, max_tokens=32, system=SYSTEM, tools=TOOLS, messages=messages)
        messages += [sent_back(r1), {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": r1.content[0].id, "content": "Rain"}]}]
        counted_next = await c.messages.count_tokens(model=MODEL, system=SYSTEM, tools=TOOLS, messages=messages)
        turns_before = len(gw.sessions["n"].turns)
        fake.push_text("Rain.")
        await c.messages.create(model=MODEL, max_tokens=32, system=SYSTEM, tools=TOOLS, messages=messages)
        prompts = [r["prompt"] for r in fake.requests]
        session = gw.sessions["n"]
    assert counted.input_tokens == len(prompts[0]) and counted_next.input_tokens == len(prompts[1])
    assert turns_before == 1  # counting is not a turn
    one_branch(session)


async def test_claude_code_shaped_requests_get_well_formed_answers(smollm2_tokenizer):
    """What Claude Code 2.1 sends: cached system blocks, many client tools, metadata, thinking, a beta header,
    context management, streaming; and its side requests (a small model, no tools) in the same session."""
    tok = smollm2_tokenizer
    tools = [{"name": n, "description": f"The {n} tool", "input_schema": {
        "type": "object", "properties": {"arg": {"type": "string"}}, "required": ["arg"], "additionalProperties": False,
        "$schema": "http://json-schema.org/draft-07/schema#"}} for n in
        ("Task", "Bash", "Glob", "Grep", "Read", "Edit", "Write", "WebFetch", "TodoWrite")]
    tools[-1]["cache_control"] = {"type": "ephemeral"}
    system = [{"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
               "cache_control": {"type": "ephemeral"}},
              {"type": "text", "text": "You are an interactive CLI tool.", "cache_control": {"type": "ephemeral"}}]
    user = {"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>\nAs you answer, use the context.\n</system-reminder>"},
        {"type": "text", "text": "list the files", "cache_control": {"type": "ephemeral"}}]}
    # its environment, as a system message after the first user message
    history = [user, {"role": "system", "content": "# Environment\nWorking directory: /app"}]
    extra = {"extra_headers": {"anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27"},
             "extra_body": {"temperature": 1, "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}}}
    async with gateway_over_fake(tok) as (fake, gw):
        c = client(gw, "cc")
        counted = await c.messages.count_tokens(model="claude-sonnet-4-5-20250929", system=system, tools=tools,
                                                messages=history, **extra)
        fake.push_text(call_text("Bash", {"arg": "ls"}))
        # the beta surface, as Claude Code uses it: POST /v1/messages?beta=true with an anthropic-beta header
        async with c.beta.messages.stream(
                model="claude-sonnet-4-5-20250929", max_tokens=32000, system=system, tools=tools, messages=history,
                metadata={"user_id": "user_x_account__session_y"}, thinking={"type": "enabled", "budget_tokens": 31999},
                betas=["claude-code-20250219", "interleaved-thinking-2025-05-14", "context-management-2025-06-27"],
                context_management={"edits": [{"type": "clear_tool_uses_20250919"}]},
                extra_body={"temperature": 1}) as s:
            main = await s.get_final_message()
        fake.push_text("Listing files")
        title = await c.messages.create(model="claude-haiku-4-5-20251001", max_tokens=512, system=[
            {"type": "text", "text": "Summarize this coding conversation in under 50 characters."}],
            messages=[{"role": "user", "content": "list the files"}], output_config={"effort": "low"}, **extra)
        session = gw.sessions["cc"]
    assert counted.input_tokens == len(session.turns[0].prompt_ids)
    assert main.stop_reason == "tool_use" and main.content[0].name == "Bash" and main.content[0].input == {"arg": "ls"}
    assert main.usage.input_tokens == len(session.turns[0].prompt_ids)
    assert tok.decode(session.turns[0].prompt_ids).endswith(
        "list the files<|im_end|>\n<|im_start|>system\n# Environment\nWorking directory: /app<|im_end|>\n"
        "<|im_start|>assistant\n")
    assert title.content[0].text == "Listing files" and title.stop_reason == "end_turn"
    assert [t.branch for t in session.turns] == [0, 1]  # the side request is a side branch of the same session


async def test_client_errors_are_anthropic_errors(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw), httpx.AsyncClient(timeout=30) as h:
        url = gw.session_base_url("e").removesuffix("/v1") + "/v1/messages"
        hi = [{"role": "user", "content": "hi"}]
        base = {"model": MODEL, "max_tokens": 16}
        cases = {
            "not json": ({"content": b"{nope"}, "not JSON"),
            "no max_tokens": ({"json": {"model": MODEL, "messages": hi}}, "max_tokens: Field required"),
            "no messages": ({"json": {**base, "messages": []}}, "at least one message"),
            "a tool role": ({"json": {**base, "messages": [{"role": "tool", "content": "x"}]}}, "role must be"),
            "a server tool": ({"json": {**base, "messages": hi, "tools": [
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]}}, "'web_search_20250305'"),
            "a bash tool": ({"json": {**base, "messages": hi, "tools": [{"type": "bash_20250124", "name": "bash"}]}},
                            "'bash_20250124'"),
            "an image": ({"json": {**base, "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                {"type": "text", "text": "what is this?"}]}]}}, "reads text only"),
            "a document": ({"json": {**base, "messages": [{"role": "user", "content": [
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]}]}},
                "reads text only"),
            "an image in a tool result": ({"json": {**base, "messages": [
                {"role": "user", "content": "look"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "get_time", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": [
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}]}]}},
                "reads text only"),
            "mcp servers": ({"json": {**base, "messages": hi, "mcp_servers": [
                {"type": "url", "url": "https://example.com/sse", "name": "x"}]}}, "mcp_servers"),
            "a prefill": ({"json": {**base, "messages": [*hi, {"role": "assistant", "content": "{"}]}}, "prefilled"),
            "a bad tool_choice": ({"json": {**base, "messages": hi, "tool_choice": {"type": "sometimes"}}}, "tool_choice"),
        }
        answers = {what: (await h.post(url, **kw), needle) for what, (kw, needle) in cases.items()}
        unknown = await h.post(gw.base_url + "/sessions/nobody/abc/v1/messages", json={**base, "messages": hi})
        sdk = client(gw, "e")
        with pytest.raises(anthropic.BadRequestError) as bad:
            await sdk.messages.create(model=MODEL, max_tokens=16, messages=hi, tools=[{"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}])
        with pytest.raises(anthropic.BadRequestError):
            await sdk.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": [
                {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}])
    for what, (r, needle) in answers.items():
        assert r.status_code == 400, (what, r.text)
        body = r.json()
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", (what, body)
        assert needle in body["error"]["message"], (what, body)
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "not_found_error"
    assert bad.value.body["error"]["type"] == "invalid_request_error" and "text_editor_20250728" in bad.value.message
    assert fake.requests == [] and gw.session_error("e") is None  # refused before the engine; not the model's


async def test_engine_failures_are_anthropic_errors(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok, max_model_len=64) as (fake, gw):
        c = client(gw, "f")
        with pytest.raises(anthropic.BadRequestError) as long:
            await c.messages.create(model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "word " * 80}])
        fake.push(Scripted(completion_ids=tok.encode("one two three four five", add_special_tokens=False), die_after_tokens=2))
        with pytest.raises(anthropic.APIStatusError) as mid:
            async with c.messages.stream(model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "count"}]) as s:
                async for _ in s:
                    pass
        gw.engine.base_url = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
        with pytest.raises(anthropic.OverloadedError) as down:
            await c.messages.create(model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(anthropic.OverloadedError):
            async with c.messages.stream(model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}]) as s:
                await s.get_final_message()
    assert long.value.body["error"]["message"].startswith("prompt is too long: ")
    assert mid.value.body == {"type": "error", "error": {"type": "overloaded_error", "message": mid.value.body["error"]["message"]}}
    assert down.value.status_code == 529 and down.value.body["error"]["type"] == "overloaded_error"
    assert isinstance(gw.session_error("f"), InfraError)
    assert gw.trajectory("f").turns == []


async def test_a_client_that_hangs_up_mid_stream_abandons_the_engine_request(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw):
        fake.push(Scripted(completion_ids=tok.encode("word " * 200, add_special_tokens=False), token_delay_s=0.02))
        c = client(gw, "h")
        async with c.messages.stream(model=MODEL, max_tokens=300, messages=[{"role": "user", "content": "talk"}]) as s:
            async for event in s:
                if event.type == "text":
                    break  # leaving the block closes the connection
        session = gw.sessions["h"]
        for _ in range(200):
            if any("closed its connection mid-stream" in n for n in session.notes) and not session.inflight:
                break
            await asyncio.sleep(0.025)
    assert any("closed its connection mid-stream" in n for n in session.notes), session.notes
    assert session.turns == [] and not session.inflight


@pytest.mark.engine
@pytest.mark.slow
async def test_a_tool_conversation_on_the_real_engine(engine_url):
    tools = [{"name": "get_weather", "description": "Get the current weather for a city", "input_schema": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False}}]
    async with build_gateway(engine_url, tokenizer="smollm2") as gw:
        c = client(gw, "real")
        messages: list[dict] = [{"role": "user", "content": "What is the weather in Paris right now?"}]
        r1 = await c.messages.create(model=MODEL, max_tokens=64, tools=tools, extra_body={"temperature": 0}, messages=messages,
                                     tool_choice={"type": "tool", "name": "get_weather"})
        assert r1.stop_reason == "tool_use", r1
        use = next(b for b in r1.content if b.type == "tool_use")
        assert use.name == "get_weather" and "city" in use.input
        messages += [sent_back(r1), {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 22 °C, light wind"}]}]
        async with c.messages.stream(model=MODEL, max_tokens=48, tools=tools, extra_body={"temperature": 0}, messages=messages) as s:
            r2 = await s.get_final_message()
        assert r2.stop_reason in ("end_turn", "max_tokens", "tool_use") and r2.usage.output_tokens > 0
        messages += [sent_back(r2), {"role": "user", "content": "Should I take an umbrella? Answer, then write DONE."}]
        counted = await c.messages.count_tokens(model=MODEL, tools=tools, messages=messages)
        r3 = await c.messages.create(model=MODEL, max_tokens=48, tools=tools, extra_body={"temperature": 0},
                                     messages=messages)
        session = gw.sessions["real"]
        # vLLM names the stop string it stopped on; it comes back as Anthropic's stop_sequence, streamed or not
        count = {"model": MODEL, "max_tokens": 40, "stop_sequences": ["5"], "extra_body": {"temperature": 0},
                 "messages": [{"role": "user", "content": "Count from 1 to 10, separated by commas."}]}
        plain = await client(gw, "count").messages.create(**count)
        async with client(gw, "count").messages.stream(**count) as s:
            streamed = await s.get_final_message()
    one_branch(session)
    assert len(session.turns) == 3 and counted.input_tokens == len(session.turns[2].prompt_ids)
    assert r3.usage.input_tokens == counted.input_tokens and r3.usage.output_tokens == len(session.turns[2].completion_ids)
    assert (plain.stop_reason, plain.stop_sequence) == (streamed.stop_reason, streamed.stop_sequence) == ("stop_sequence", "5")
    assert plain.content[0].text == streamed.content[0].text and "5" not in plain.content[0].text
