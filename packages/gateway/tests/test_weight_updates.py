"""A weight update under a running gateway: model calls on the engine either finish on the old weights or are cut and
continued from what they sampled on the new ones, and every token keeps the version it was sampled under.

The engine is FakeEngineForTests streaming one token every ``token_delay_s`` (so a pause lands mid-answer); the
continuation is scripted as the engine's next answer, and what the gateway sent for it is read back from the
engine's own request log.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from fake_engine import Scripted, gateway_over_fake

from tackroom import TokenTurn

QUESTION = [{"role": "user", "content": "Count, please."}]


def ids(tok, text: str, *, close: bool = False) -> list[int]:
    out = tok.encode(text, add_special_tokens=False)
    return out + [tok.convert_tokens_to_ids("<|im_end|>")] if close else out


def session_url(gw, name: str = "s") -> str:
    return gw.session_base_url(name) + "/chat/completions"


async def read_stream(response: httpx.Response, events: list[dict[str, Any]]) -> None:
    async for line in response.aiter_lines():
        if line.startswith("data: ") and line[6:] != "[DONE]":
            events.append(json.loads(line[6:]))


def streamed_text(events: list[dict[str, Any]]) -> str:
    return "".join((c["delta"].get("content") or "") for e in events for c in e.get("choices") or [])


async def until(condition, timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


async def test_a_streamed_call_cut_by_a_continue_pause_goes_on_from_its_prefix_on_the_new_version(smollm2_tokenizer):
    tok = smollm2_tokenizer
    first = ids(tok, " one two three four five six seven eight nine ten eleven twelve")
    rest = ids(tok, " and that is all.", close=True)
    async with gateway_over_fake(tok) as (fake, gw):
        gw.resume(1)
        fake.push(Scripted(completion_ids=first, token_delay_s=0.05), Scripted(completion_ids=rest))
        events: list[dict[str, Any]] = []
        async with httpx.AsyncClient(timeout=30) as client:
            body = {"model": "m", "messages": QUESTION, "stream": True, "max_tokens": 40, "logprobs": True}
            async with client.stream("POST", session_url(gw), json=body) as r:
                assert r.status_code == 200
                reading = asyncio.ensure_future(read_stream(r, events))
                await until(lambda: len(streamed_text(events)) >= len(" one two three"))
                state = await gw.pause("continue")
                assert state.paused and state.on_engine == 0  # the engine request is cut, nothing on the engine
                await until(lambda: gw.backend.weights.state().waiting == 1)  # the call waits for the resume
                assert len(fake.requests) == 1
                gw.resume(2)
                await reading

    sent, continuation = fake.requests
    prompt = sent["prompt"]
    prefix = continuation["prompt"][len(prompt):]
    assert continuation["prompt"] == prompt + prefix  # token in: the prompt ids and the sampled ids, as they were
    assert 3 <= len(prefix) < len(first) and prefix == first[:len(prefix)]
    assert continuation["max_tokens"] == 40 - len(prefix)  # what is left of the call's budget

    events_text = streamed_text(events)
    assert events_text == tok.decode(prefix + rest, skip_special_tokens=True)  # one whole answer, no token twice
    finish = [c["finish_reason"] for e in events for c in e.get("choices") or [] if c["finish_reason"]]
    assert finish == ["stop"]  # one finish, the last segment's
    lp = [entry["logprob"] for e in events for c in e.get("choices") or [] for entry in (c.get("logprobs") or {}).get("content") or []]
    assert len(lp) == len(prefix) + len(rest)


async def test_the_recorded_turn_is_the_concatenation_with_each_tokens_version(smollm2_tokenizer):
    tok = smollm2_tokenizer
    first = ids(tok, " alpha beta gamma delta epsilon zeta eta theta iota kappa")
    rest = ids(tok, " lambda.", close=True)
    async with gateway_over_fake(tok) as (fake, gw):
        gw.resume(1)
        fake.push(Scripted(completion_ids=first, token_delay_s=0.05), Scripted(completion_ids=rest))
        events: list[dict[str, Any]] = []
        async with httpx.AsyncClient(timeout=30) as client:
            body = {"model": "m", "messages": QUESTION, "stream": True, "max_tokens": 64}
            async with client.stream("POST", session_url(gw), json=body) as r:
                reading = asyncio.ensure_future(read_stream(r, events))
                await until(lambda: len(streamed_text(events)) >= len(" alpha beta"))
                await gw.pause("continue")
                gw.resume(2)
                await reading
        session = gw.session("s")
        turn = session.turns[0].token_turn()
        traj = gw.trajectory("s")

    prefix = fake.requests[1]["prompt"][len(fake.requests[0]["prompt"]):]
    k = len(prefix)
    assert turn.completion_ids == prefix + rest
    assert turn.token_versions == [1] * k + [2] * len(rest)
    assert turn.policy_version == 1 and turn.oldest_version == 1  # the version the turn started under
    # the engine's logprob of each token, in order: the prefix's from the first request, the rest's from the second
    expected = [-0.25 - 0.001 * j for j in range(k)] + [-0.25 - 0.001 * j for j in range(len(rest))]
    assert turn.logprobs == pytest.approx(expected)
    assert turn.finish_reason == "stop"
    start = len(turn.prompt_ids)
    assert traj.token_ids == turn.prompt_ids + turn.completion_ids
    assert traj.loss_mask[start:] == [1] * (k + len(rest)) and traj.logprobs[start:] == pytest.approx(expected)
    assert any("continued" in n for n in traj.notes)
    assert streamed_text(events) == tok.decode(prefix + rest, skip_special_tokens=True)


async def test_a_finish_pause_waits_for_the_call_on_the_engine_which_completes_on_the_old_version(smollm2_tokenizer):
    tok = smollm2_tokenizer
    answer = ids(tok, " red green blue cyan magenta yellow", close=True)
    later = ids(tok, " black.", close=True)
    async with gateway_over_fake(tok) as (fake, gw):
        gw.resume(1)
        fake.push(Scripted(completion_ids=answer, token_delay_s=0.05), Scripted(completion_ids=later))
        async with httpx.AsyncClient(timeout=30) as client:
            body = {"model": "m", "messages": QUESTION, "stream": True}
            events: list[dict[str, Any]] = []
            async with client.stream("POST", session_url(gw, "a"), json=body) as r:
                reading = asyncio.ensure_future(read_stream(r, events))
                await until(lambda: bool(streamed_text(events)))
                pausing = asyncio.ensure_future(gw.pause("finish"))
                await asyncio.sleep(0.1)
                assert not pausing.done()  # the update waits for the call on the engine
                await reading
            state = await asyncio.wait_for(pausing, 5)
            assert state.paused and state.mode == "finish" and state.on_engine == 0
            # a call made while paused waits for the resume, then samples with the new version
            waiting = asyncio.ensure_future(client.post(session_url(gw, "b"), json={"model": "m", "messages": QUESTION}))
            await until(lambda: gw.backend.weights.state().waiting == 1)
            assert len(fake.requests) == 1
            gw.resume(2)
            assert (await waiting).status_code == 200
        a, b = gw.session("a").turns[0].token_turn(), gw.session("b").turns[0].token_turn()

    assert a.completion_ids == answer and a.policy_version == 1 and a.token_versions is None
    assert streamed_text(events) == tok.decode(answer, skip_special_tokens=True)
    assert b.completion_ids == later and b.policy_version == 2
    assert len(fake.requests) == 2


async def test_a_cut_before_the_first_token_samples_the_whole_answer_on_the_new_version(smollm2_tokenizer):
    tok = smollm2_tokenizer
    answer = ids(tok, " fresh.", close=True)
    async with gateway_over_fake(tok) as (fake, gw):
        gw.resume(1)
        fake.push(Scripted(completion_ids=ids(tok, " stale"), delay_s=1.5), Scripted(completion_ids=answer),
                  Scripted(completion_ids=ids(tok, " stale"), delay_s=1.5), Scripted(completion_ids=answer))
        async with httpx.AsyncClient(timeout=30) as client:
            for name, stream in (("streamed", True), ("whole", False)):
                body = {"model": "m", "messages": QUESTION, "stream": stream}
                asking = asyncio.ensure_future(client.post(session_url(gw, name), json=body))
                await until(lambda: len(fake.requests) in (1, 3))
                await gw.pause("continue")
                gw.resume(2)
                reply = await asyncio.wait_for(asking, 10)
                assert reply.status_code == 200
                text = (streamed_text([json.loads(line[6:]) for line in reply.text.splitlines()
                                       if line.startswith("data: ") and line[6:] != "[DONE]"])
                        if stream else reply.json()["choices"][0]["message"]["content"])
                assert text == " fresh."
                turn = gw.session(name).turns[0].token_turn()
                assert turn.completion_ids == answer and turn.policy_version == 2 and turn.token_versions is None
                assert turn.oldest_version == 2
    prompts = [r["prompt"] for r in fake.requests]
    assert prompts[0] == prompts[1] and prompts[2] == prompts[3]  # nothing sampled: the same prompt again


async def test_a_continuation_the_engine_fails_ends_the_call_as_the_engines_failure(smollm2_tokenizer):
    tok = smollm2_tokenizer
    first = ids(tok, " one two three four five six seven eight nine ten")
    async with gateway_over_fake(tok, retries=0) as (fake, gw):
        gw.resume(1)
        fake.push(Scripted(completion_ids=first, token_delay_s=0.05), Scripted(status=503, error="engine restarting"))
        events: list[dict[str, Any]] = []
        async with httpx.AsyncClient(timeout=30) as client:
            body = {"model": "m", "messages": QUESTION, "stream": True}
            async with client.stream("POST", session_url(gw), json=body) as r:
                reading = asyncio.ensure_future(read_stream(r, events))
                await until(lambda: len(streamed_text(events)) >= len(" one two"))
                await gw.pause("continue")
                gw.resume(2)
                await reading
        session = gw.session("s")
        error = gw.session_error("s")

    assert events[-1].get("error"), events[-1]  # the stream ends with an error event, as any mid-stream failure
    assert "engine restarting" in events[-1]["error"]["message"]
    assert session.turns == [] and error is not None and error.error_class == "infra"
    assert not [c for e in events for c in e.get("choices") or [] if c.get("finish_reason")]


async def test_a_resume_that_never_comes_ends_the_waiting_call_at_the_engines_read_timeout(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok, timeouts={"read": 0.5}) as (fake, gw):
        fake.push(Scripted(completion_ids=ids(tok, " late.", close=True)))
        await gw.pause("finish")
        async with httpx.AsyncClient(timeout=30) as client:
            reply = await client.post(session_url(gw), json={"model": "m", "messages": QUESTION})
        error = gw.session_error("s")
    assert reply.status_code == 504, reply.text
    assert "no resume came within 0.5s" in reply.json()["error"]["message"]
    assert error is not None and error.error_class == "infra" and fake.requests == []


async def test_the_admin_routes_pause_and_resume_and_name_the_modes(smollm2_tokenizer):
    async with gateway_over_fake(smollm2_tokenizer) as (fake, gw):
        admin = {"Authorization": f"Bearer {gw.admin_token}"}
        async with httpx.AsyncClient(base_url=gw.base_url, timeout=10) as client:
            wrong = await client.post("/weights/pause", json={"mode": "drain"}, headers=admin)
            assert wrong.status_code == 400 and "finish, continue" in wrong.json()["error"]["message"]
            assert (await client.post("/weights/pause", json={"mode": "continue"})).status_code == 401
            paused = await client.post("/weights/pause", json={"mode": "continue"}, headers=admin)
            assert paused.json() == {"paused": True, "mode": "continue", "policy_version": None, "on_engine": 0,
                                     "waiting": 0}
            resumed = await client.post("/weights/resume", json={"policy_version": 3}, headers=admin)
            assert resumed.json()["paused"] is False and resumed.json()["policy_version"] == 3
            assert (await client.get("/weights", headers=admin)).json()["policy_version"] == 3


def test_a_turn_checks_its_token_versions_against_its_completion():
    with pytest.raises(ValueError, match="token_versions has 1 entries for 2 completion ids"):
        TokenTurn(prompt_ids=[1], completion_ids=[2, 3], token_versions=[1])
    turn = TokenTurn(prompt_ids=[1], completion_ids=[2, 3, 4], policy_version=4, token_versions=[4, 4, 5])
    assert turn.oldest_version == 4
    assert TokenTurn(prompt_ids=[1], completion_ids=[2], policy_version=7).oldest_version == 7


async def test_an_agent_that_gives_up_on_a_held_call_ended_on_the_machinery_not_the_model(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with gateway_over_fake(tok) as (fake, gw):
        fake.push(Scripted(completion_ids=ids(tok, " late.", close=True)))
        await gw.pause("continue")
        async with httpx.AsyncClient(timeout=0.5) as client:
            with pytest.raises(httpx.ReadTimeout):  # the agent's own timeout, shorter than the gateway's
                await client.post(session_url(gw), json={"model": "m", "messages": QUESTION})
        await until(lambda: not gw.session("s").inflight)
        error = gw.session_error("s")
        gw.resume(2)
    assert error is not None and error.error_class == "infra"
    assert "paused for a weight update" in str(error) and fake.requests == []
