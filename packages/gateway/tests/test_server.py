"""The gateway's HTTP behaviour: sessions, branches, streaming, parameters and classified engine errors.

The engine is FakeEngineForTests (see its docstring): these are failures and exact
ids that cannot be ordered from a real vLLM on demand. test_engine_e2e.py covers
the same paths against the real engine.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
from fake_engine import Scripted, gateway_over_fake

from tackroom import InfraError, ModelError
from tackroom_gateway import build_gateway
from tackroom_gateway.errors import EngineUnavailableError

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
]


def ids(tok, text: str, eot: bool = True) -> list[int]:
    out = tok.encode(text, add_special_tokens=False)
    return out + [tok.convert_tokens_to_ids("<|im_end|>")] if eot else out


async def sse_events(client: httpx.AsyncClient, url: str, body: dict) -> list[dict]:
    events = []
    async with client.stream("POST", url, json={**body, "stream": True}) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                data = line[6:]
                events.append({"done": True} if data == "[DONE]" else json.loads(data))
    return events


def aggregate(events: list[dict]) -> dict:
    msg: dict = {"content": "", "tool_calls": [], "finish_reason": None}
    for e in events:
        for c in e.get("choices", []):
            d = c["delta"]
            msg["content"] += d.get("content") or ""
            msg["tool_calls"] += d.get("tool_calls") or []
            msg["finish_reason"] = c["finish_reason"] or msg["finish_reason"]
    return msg


async def test_streaming_and_plain_answers_agree(smollm2_tokenizer):
    tok = smollm2_tokenizer
    text = 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon"}}\n</tool_call>'
    async with gateway_over_fake(tok) as (fake, gw), httpx.AsyncClient(timeout=30) as c:
        fake.push(Scripted(completion_ids=ids(tok, text)), Scripted(completion_ids=ids(tok, text)))
        body = {"messages": [{"role": "user", "content": "Lyon?"}], "tools": TOOLS, "stream_options": {"include_usage": True}}
        plain = (await c.post(gw.session_base_url("a") + "/chat/completions", json=body)).json()
        events = await sse_events(c, gw.session_base_url("b") + "/chat/completions", body)
        ta, tb = gw.trajectory("a"), gw.trajectory("b")
    msg = plain["choices"][0]["message"]
    streamed = aggregate(events)
    assert msg["content"] == streamed["content"].strip() == "Checking."
    assert [t["function"] for t in msg["tool_calls"]] == [t["function"] for t in streamed["tool_calls"]]
    assert plain["choices"][0]["finish_reason"] == streamed["finish_reason"] == "tool_calls"
    assert events[-1] == {"done": True} and events[-2]["usage"]["completion_tokens"] == len(ids(tok, text))
    assert ta.token_ids == tb.token_ids and ta.loss_mask == tb.loss_mask and ta.logprobs == tb.logprobs


async def test_rewritten_history_starts_a_marked_branch(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw), httpx.AsyncClient(base_url=gw.session_base_url("s"), timeout=30) as c:
        fake.default = lambda prompt: Scripted(completion_ids=ids(tok, "ok"))
        m = [{"role": "user", "content": "one"}]
        r0 = (await c.post("/chat/completions", json={"messages": m})).json()["choices"][0]["message"]
        m1 = [*m, r0, {"role": "user", "content": "two"}]
        r1 = (await c.post("/chat/completions", json={"messages": m1})).json()["choices"][0]["message"]
        # the client edits its first message: no splicing, a new branch from scratch
        edited = [{"role": "user", "content": "one (edited)"}, r0, {"role": "user", "content": "two"}]
        await c.post("/chat/completions", json={"messages": edited})
        # the client retries the second request: a new branch extending turn 0 with the same prompt
        await c.post("/chat/completions", json={"messages": m1})
        # and continues the retried line: stays on that branch
        await c.post("/chat/completions", json={"messages": [*m1, r1, {"role": "user", "content": "three"}]})
        traj = gw.trajectory("s")
        by_http = (await c.get(gw.session_base_url("s").removesuffix("/v1") + "/trajectory")).json()
    assert [t.branch for t in traj.turns] == [0, 0, 1, 2, 2]
    assert traj.turns[3].prompt_ids == traj.turns[1].prompt_ids
    assert traj.turns[2].prompt_ids == fake.requests[2]["prompt"]
    assert any("branch 1" in n and "rendered from scratch" in n for n in traj.notes)
    assert any("branch 2" in n and "extends turn 0" in n for n in traj.notes)
    # the flattened sequence is the newest branch's lineage: turn 0 -> 3 -> 4
    t0, t3, t4 = traj.turns[0], traj.turns[3], traj.turns[4]
    assert traj.token_ids == t4.prompt_ids + t4.completion_ids
    assert sum(traj.loss_mask) == len(t0.completion_ids) + len(t3.completion_ids) + len(t4.completion_ids)
    assert by_http["token_ids"] == traj.token_ids and [t["branch"] for t in by_http["turns"]] == [0, 0, 1, 2, 2]
    # ... and says what it leaves out (turns 1 and 2), since a reader would take it for the whole episode
    sampled = sum(len(t.completion_ids) for t in traj.turns)
    assert traj.metrics["flattened_completion_tokens"] == sum(traj.loss_mask) < sampled
    assert any(n.startswith(f"the flattened tokens are branch 2's (3 of 5 turns, {sum(traj.loss_mask)} of {sampled} "
                            "sampled tokens); 2 turn(s) on 2 other branch(es)") for n in traj.notes), traj.notes
    assert gw.trajectory("s", branch=1).token_ids == traj.turns[2].prompt_ids + traj.turns[2].completion_ids


async def test_side_conversation_does_not_break_the_main_line(smollm2_tokenizer):
    """Harnesses that ask for a title with another prompt in the same session keep the main line on branch 0."""
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw), httpx.AsyncClient(base_url=gw.session_base_url("s"), timeout=30) as c:
        fake.default = lambda prompt: Scripted(completion_ids=ids(tok, "fine"))
        main = [{"role": "user", "content": "task"}]
        r0 = (await c.post("/chat/completions", json={"messages": main})).json()["choices"][0]["message"]
        await c.post("/chat/completions", json={"messages": [{"role": "system", "content": "Write a title."}, *main]})
        await c.post("/chat/completions", json={"messages": [*main, r0, {"role": "user", "content": "more"}]})
        traj = gw.trajectory("s")
    assert [t.branch for t in traj.turns] == [0, 1, 0]
    assert traj.token_ids[: len(traj.turns[0].prompt_ids)] == traj.turns[0].prompt_ids


async def test_parameters_reach_the_engine(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok, max_model_len=400) as (fake, gw), httpx.AsyncClient(timeout=30) as c:
        fake.default = lambda prompt: Scripted(completion_ids=ids(tok, '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'))
        url = gw.session_base_url("p") + "/chat/completions"
        base = {"messages": [{"role": "user", "content": "hi"}]}
        await c.post(url, json={**base, "temperature": 0.3, "top_p": 0.9, "seed": 7, "stop": ["\n\n"], "max_tokens": 10_000,
                                "response_format": {"type": "json_object"}, "top_k": 5, "user": "ignored"})
        await c.post(url, json={**base, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})
        await c.post(url, json={**base, "tools": TOOLS, "tool_choice": "required"})
        r_none = await c.post(url, json={**base, "tools": TOOLS, "tool_choice": "none"})
        bad = await c.post(url, json={**base, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}})
        n2 = await c.post(url, json={**base, "n": 2})
    first = fake.requests[0]
    assert {k: first[k] for k in ("temperature", "top_p", "seed", "stop", "top_k", "response_format")} == {
        "temperature": 0.3, "top_p": 0.9, "seed": 7, "stop": ["\n\n"], "top_k": 5, "response_format": {"type": "json_object"}}
    assert "user" not in first
    assert first["max_tokens"] == 400 - len(first["prompt"])  # clamped to the room left in the context
    assert first["return_token_ids"] is True and first["logprobs"] == 0
    assert first["stop_token_ids"] == [tok.convert_tokens_to_ids("<|im_end|>")]
    named = json.loads(fake.requests[1]["structured_outputs"]["structural_tag"])
    assert named["format"]["elements"][0]["value"] == '<tool_call>\n{"name": "get_weather", "arguments": '
    assert named["format"]["elements"][1]["json_schema"] == TOOLS[0]["function"]["parameters"]
    required = json.loads(fake.requests[2]["structured_outputs"]["structural_tag"])
    assert required["format"]["type"] == "or" and len(required["format"]["elements"]) == 2
    assert r_none.json()["choices"][0]["message"]["content"].startswith("<tool_call>")  # none: not parsed
    assert bad.status_code == 400 and "not among the request's tools" in bad.json()["error"]["message"]
    assert n2.status_code == 400 and n2.json()["error"]["code"] == "invalid_request"
    assert len(fake.requests) == 4  # the bad requests never reached the engine
    # every turn sampled under a grammar says so: its logprobs are the constrained distribution's
    assert [t.logprobs_constrained for t in gw.trajectory("p").turns] == [True, True, True, False]


async def test_a_plain_turn_and_a_text_response_format_are_not_constrained(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw), httpx.AsyncClient(timeout=30) as c:
        fake.default = lambda prompt: Scripted(completion_ids=ids(tok, "fine"))
        url = gw.session_base_url("q") + "/chat/completions"
        base = {"messages": [{"role": "user", "content": "hi"}]}
        await c.post(url, json=base)
        await c.post(url, json={**base, "response_format": {"type": "text"}, "tools": TOOLS, "tool_choice": "auto"})
        await c.post(url, json={**base, "stream": True, "structured_outputs": {"regex": "fi.*"}})
    assert [t.logprobs_constrained for t in gw.trajectory("q").turns] == [False, False, True]


async def test_engine_5xx_is_retried(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw), httpx.AsyncClient(timeout=30) as c:
        fake.push(Scripted(status=503, error="busy"), Scripted(status=500, error="oops"), Scripted(completion_ids=ids(tok, "fine")))
        r = await c.post(gw.session_base_url("r") + "/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "fine"
    assert len(fake.requests) == 3 and gw.session_error("r") is None


async def test_context_length_is_a_model_error(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok, max_model_len=30) as (fake, gw), httpx.AsyncClient(timeout=30) as c:
        url = gw.session_base_url("ctx") + "/chat/completions"
        local = await c.post(url, json={"messages": [{"role": "user", "content": "word " * 40}]})
        fake.max_model_len = 4096
        gw.engine.info.max_model_len = 4096
        fake.push(Scripted(status=400, error="This model's maximum context length is 4096 tokens. However, you requested 5000 tokens."))
        remote = await c.post(url, json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10})
        other = None
        fake.push(Scripted(status=400, error="temperature must be non-negative"))
        other = await c.post(gw.session_base_url("x") + "/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    for r in (local, remote):
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert len(fake.requests) == 2  # the prompt that cannot fit was never sent
    err = gw.session_error("ctx")
    assert isinstance(err, ModelError) and err.error_class == "model"
    assert gw.trajectory("ctx").stop_reason == "context_exhausted"
    assert other.status_code == 400 and other.json()["error"]["code"] == "engine_rejected_request"
    assert "temperature" in other.json()["error"]["message"] and isinstance(gw.session_error("x"), ModelError)


async def test_engine_dying_mid_stream_is_an_infra_error_not_a_hang(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw), httpx.AsyncClient(timeout=30) as c:
        fake.push(Scripted(completion_ids=ids(tok, "one two three four five six"), die_after_tokens=3))
        start = time.monotonic()
        events = await sse_events(c, gw.session_base_url("d") + "/chat/completions", {"messages": [{"role": "user", "content": "count"}]})
        elapsed = time.monotonic() - start
    errors = [e for e in events if "error" in e]
    assert len(errors) == 1 and errors[0]["error"]["code"] == "engine_unavailable"
    assert events[-1] == {"done": True} and elapsed < 10
    assert isinstance(gw.session_error("d"), InfraError)
    assert gw.trajectory("d").turns == []  # a broken turn is not recorded


async def test_engine_down_is_an_infra_error(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw), httpx.AsyncClient(timeout=30) as c:
        gw.engine.base_url = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
        start = time.monotonic()
        r = await c.post(gw.session_base_url("down") + "/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        s = await c.post(gw.session_base_url("down") + "/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "stream": True})
    assert r.status_code == s.status_code == 503
    assert r.json()["error"]["code"] == "engine_unavailable" and "unavailable after 4 attempts" in r.json()["error"]["message"]
    assert time.monotonic() - start < 10
    err = gw.session_error("down")
    assert isinstance(err, EngineUnavailableError) and isinstance(err, InfraError) and err.error_class == "infra"


async def test_gateway_refuses_to_start_without_an_engine():
    gw = build_gateway("http://127.0.0.1:9/v1", tokenizer="smollm2", backoff_s=0.01)
    with pytest.raises(InfraError, match="unavailable"):
        await gw.start()
    await gw.stop()


async def test_models_sessions_and_lookup_errors(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw), httpx.AsyncClient(base_url=gw.base_url, timeout=30) as c:
        admin = {"Authorization": f"Bearer {gw.admin_token}"}
        fake.default = lambda prompt: Scripted(completion_ids=ids(tok, "hey"))
        assert (await c.get("/v1/models")).json()["data"][0]["id"] == "fake-model"
        z = gw.session_base_url("z").removeprefix(gw.base_url)
        assert (await c.get(f"{z}/models")).json()["data"][0]["max_model_len"] == 4096
        missing = await c.get("/sessions/nobody/trajectory", headers=admin)
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "session_not_found"
        await c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}, headers=admin)
        assert [s["session_id"] for s in (await c.get("/sessions", headers=admin)).json()] == ["z", "default"]
        closed = (await c.delete("/sessions/default", headers=admin)).json()
        assert len(closed["turns"]) == 1
        assert (await c.get("/sessions/default/trajectory", headers=admin)).status_code == 404
        bad = await c.post("/v1/chat/completions", content=b"{not json", headers=admin)
        assert bad.status_code == 400 and "not JSON" in bad.json()["error"]["message"]
    policy_url = gw.session_base_url("t1")
    assert policy_url.startswith(gw.base_url + "/sessions/t1/") and policy_url.endswith("/v1")
