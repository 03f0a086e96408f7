"""Infra faults of the engine end a trial ``infra``, never ``model``; the client always gets an OpenAI error.

The engine is ``tackroom_gateway.testing.MisbehavingEngine`` on a real socket (faults a real
vLLM cannot produce on demand: 429 with Retry-After, an HTML 500, a hang, a dropped
connection, non-JSON); the gateway is the real one with SmolLM2's real tokenizer.

The converse matters as much: a request still open when the agent's turn ends is
infra only when the engine does not answer the gateway's liveness probes; on a
healthy engine it is the model's own long generation and the trial stays ``model``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import types
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

import tackroom
import tackroom_app
from tackroom import ExecResult, InfraError, ModelError, Sandbox, SandboxProvider, Trial
from tackroom_app import TrialPlugins, TrialRuntime
from tackroom_gateway import (
    ChatTemplate,
    EngineBadResponseError,
    EngineRateLimitedError,
    EngineRequestInterruptedError,
    EngineSettings,
    EngineTimeoutError,
    EngineTimeouts,
    EngineUnavailableError,
    GatewaySettings,
    PolicyGateway,
)
from tackroom_gateway.engine_client import parse_retry_after
from tackroom_gateway.liveness import EngineLiveness
from tackroom_gateway.testing import EngineReply, MisbehavingEngine
from tackroom_gateway.trial_sessions import GatewaySessions

HI = {"messages": [{"role": "user", "content": "hi"}]}
FAST_PROBES = {"probe_interval_s": 0.2, "probe_timeout_s": 0.5}
"""Liveness probes after 0.2 s of engine silence, failed after 0.5 s: a hang is known within about 0.7 s."""


def encoder(tok):
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    return lambda text: tok.encode(text, add_special_tokens=False) + [eot]


@contextlib.asynccontextmanager
async def engine_and_gateway(tok, script=(), *, then=None, probe=None, read_timeout: float = 30.0,
                             max_model_len: int = 4096,
                             **engine_options) -> AsyncIterator[tuple[MisbehavingEngine, PolicyGateway]]:
    engine_options.setdefault("backoff_s", 0.01)
    async with MisbehavingEngine(script, then=then, probe=probe, model="smollm2", encode=encoder(tok),
                                 max_model_len=max_model_len, decode=lambda ids: tok.decode(ids)) as engine:
        settings = GatewaySettings(engine=EngineSettings(base_url=engine.base_url,
                                                         timeouts=EngineTimeouts(read=read_timeout), **engine_options))
        gw = PolicyGateway(settings, template=ChatTemplate(tok))
        await gw.start()
        try:
            yield engine, gw
        finally:
            await gw.stop()


def no_tracebacks(caplog) -> None:
    """Nothing the gateway or its server logged carries a traceback or an unhandled ASGI exception."""
    for rec in caplog.records:
        assert rec.exc_info is None, f"{rec.name}: {rec.getMessage()}"
        assert "Exception in ASGI application" not in rec.getMessage(), rec.getMessage()
        assert "Traceback" not in rec.getMessage(), rec.getMessage()


def openai_error(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "code"} and err["code"] == code and err["message"]
    return err


# -- retries ---------------------------------------------------------------------------------
async def test_429_is_retried_after_the_engines_retry_after(smollm2_tokenizer, caplog):
    tok = smollm2_tokenizer
    async with engine_and_gateway(tok, [EngineReply.rate_limited(retry_after=1), EngineReply.ok("fine")]) as (engine, gw), \
            httpx.AsyncClient(timeout=30) as c:
        start = time.monotonic()
        r = await c.post(gw.session_base_url("s") + "/chat/completions", json=HI)
        waited = time.monotonic() - start
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "fine"
    assert len(engine.requests) == 2 and gw.session_error("s") is None
    assert 0.9 <= waited < 5, f"waited {waited:.2f}s; Retry-After said 1 s (the backoff alone is 0.01 s)"
    assert engine.requests[1].received_at - engine.requests[0].received_at >= 0.9
    no_tracebacks(caplog)


async def test_retry_after_as_an_http_date_and_the_cap(smollm2_tokenizer):
    tok = smollm2_tokenizer
    soon = datetime.now(UTC) + timedelta(seconds=3)
    assert 1.5 < parse_retry_after(soon.strftime("%a, %d %b %Y %H:%M:%S GMT")) <= 3.0
    # the scripted 429 asks for a date far enough ahead that starting the gateway on a loaded machine
    # leaves more than the cap: the first gap is the cap, as for the delta-seconds 3600 after it
    later = datetime.now(UTC) + timedelta(seconds=8)
    assert parse_retry_after("2.5") == 2.5 and parse_retry_after("soon") is None and parse_retry_after(None) is None
    script = [EngineReply.rate_limited(retry_after=later), EngineReply.unavailable(retry_after=3600), EngineReply.ok("fine")]
    async with engine_and_gateway(tok, script, retry_after_cap_s=2.0) as (engine, gw), httpx.AsyncClient(timeout=30) as c:
        start = time.monotonic()
        r = await c.post(gw.session_base_url("s") + "/chat/completions", json=HI)
        waited = time.monotonic() - start
    assert r.status_code == 200 and len(engine.requests) == 3
    gaps = [b.received_at - a.received_at for a, b in zip(engine.requests, engine.requests[1:], strict=False)]
    assert 1.8 <= gaps[0] < 3.0, f"the HTTP date asked for ~5-8 s, capped at 2 s; the gateway waited {gaps[0]:.2f}s"
    assert 1.8 <= gaps[1] < 3.0, f"Retry-After: 3600 must be capped at 2 s, waited {gaps[1]:.2f}s"
    assert waited < 8


async def test_429_past_the_retries_is_a_429_and_an_infra_error(smollm2_tokenizer, caplog):
    tok = smollm2_tokenizer
    async with engine_and_gateway(tok, then=EngineReply.rate_limited(retry_after=0)) as (engine, gw), \
            httpx.AsyncClient(timeout=30) as c:
        r = await c.post(gw.session_base_url("s") + "/chat/completions", json=HI)
        streamed = await c.post(gw.session_base_url("t") + "/chat/completions", json={**HI, "stream": True})
    err = openai_error(r, 429, "engine_rate_limited")
    assert err["type"] == "rate_limit_error" and "429" in err["message"] and "4 attempts" in err["message"]
    assert r.headers["retry-after"] == "1"  # the engine's 0 s, as a whole number a client can use
    openai_error(streamed, 429, "engine_rate_limited")  # before any output: a plain HTTP error too
    assert len(engine.requests) == 8  # 1 + 3 retries, twice
    for sid in ("s", "t"):
        e = gw.session_error(sid)
        assert isinstance(e, EngineRateLimitedError) and isinstance(e, InfraError) and not isinstance(e, ModelError)
        assert e.error_class == "infra"
    no_tracebacks(caplog)


async def test_the_retry_budget_bounds_the_total_wait(smollm2_tokenizer):
    tok = smollm2_tokenizer
    async with engine_and_gateway(tok, then=EngineReply.unavailable(retry_after=0.4), retries=100,
                                  retry_budget_s=1.5) as (engine, gw), httpx.AsyncClient(timeout=30) as c:
        start = time.monotonic()
        r = await c.post(gw.session_base_url("s") + "/chat/completions", json=HI)
        took = time.monotonic() - start
    openai_error(r, 503, "engine_unavailable")
    assert took < 10, f"a 1.5 s budget took {took:.1f}s"  # 100 retries 0.4 s apart would take 40 s
    assert 3 <= len(engine.requests) <= 5, len(engine.requests)  # Retry-After 0.4 s apart, not 101 attempts
    assert isinstance(gw.session_error("s"), EngineUnavailableError)


FAILURES = {
    "503": (EngineReply.unavailable(), 503, "engine_unavailable", EngineUnavailableError),
    "500-html": (EngineReply.error(500), 503, "engine_unavailable", EngineUnavailableError),
    "connection-closed": (EngineReply.close(), 503, "engine_unavailable", EngineUnavailableError),
    "non-json-200": (EngineReply.non_json(), 502, "engine_bad_response", EngineBadResponseError),
    "truncated-json-200": (EngineReply.truncated_json(), 502, "engine_bad_response", EngineBadResponseError),
}


@pytest.mark.parametrize("name", list(FAILURES))
async def test_each_fault_is_retried_then_answered_as_an_openai_infra_error(smollm2_tokenizer, caplog, name):
    tok = smollm2_tokenizer
    fault, status, code, error_type = FAILURES[name]
    async with engine_and_gateway(tok, [fault, fault, EngineReply.ok("recovered")], then=fault) as (engine, gw), \
            httpx.AsyncClient(timeout=30) as c:
        recovered = await c.post(gw.session_base_url("ok") + "/chat/completions", json=HI)
        failed = await c.post(gw.session_base_url("bad") + "/chat/completions", json=HI)
        failed_stream = await c.post(gw.session_base_url("bad-stream") + "/chat/completions", json={**HI, "stream": True})
    assert recovered.status_code == 200 and recovered.json()["choices"][0]["message"]["content"] == "recovered"
    assert gw.session_error("ok") is None and len(gw.trajectory("ok").turns) == 1
    assert len(engine.requests) == 3 + 4 + 4
    for sid, r in (("bad", failed), ("bad-stream", failed_stream)):
        err = openai_error(r, status, code)
        assert "Traceback" not in err["message"] and "<html" not in err["message"].lower()
        e = gw.session_error(sid)
        assert type(e) is error_type and e.error_class == "infra", repr(e)
    no_tracebacks(caplog)


async def test_an_html_500_is_summarised_not_pasted(smollm2_tokenizer):
    page = "<html><head><style>h1{color:red}</style></head><body><h1>502 Bad Gateway</h1><p>nginx</p></body></html>"
    async with engine_and_gateway(smollm2_tokenizer, then=EngineReply.error(500, page), retries=0) as (_, gw), \
            httpx.AsyncClient(timeout=30) as c:
        r = await c.post(gw.session_base_url("s") + "/chat/completions", json=HI)
    msg = openai_error(r, 503, "engine_unavailable")["message"]
    assert "502 Bad Gateway nginx" in msg and "<" not in msg and "color:red" not in msg


async def test_faults_mid_stream_are_error_events_and_infra(smollm2_tokenizer, caplog):
    tok = smollm2_tokenizer
    text = "one two three four five six seven"
    script = [EngineReply.ok(text, break_after_chunks=3), EngineReply.ok(text, break_after_chunks=3, break_with="non_json")]
    async with engine_and_gateway(tok, script) as (engine, gw), httpx.AsyncClient(timeout=30) as c:
        outcomes = {}
        for sid in ("closed", "garbled"):
            events = []
            async with c.stream("POST", gw.session_base_url(sid) + "/chat/completions", json={**HI, "stream": True}) as r:
                assert r.status_code == 200
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        events.append(line[6:])
            outcomes[sid] = events
    for sid, code, error_type in (("closed", "engine_unavailable", EngineUnavailableError),
                                  ("garbled", "engine_bad_response", EngineBadResponseError)):
        events = outcomes[sid]
        assert events[-1] == "[DONE]"
        errors = [json.loads(e)["error"] for e in events[:-1] if "error" in json.loads(e)]
        assert len(errors) == 1 and errors[0]["code"] == code, events
        assert type(gw.session_error(sid)) is error_type and gw.session_error(sid).error_class == "infra"
        assert gw.trajectory(sid).turns == []  # a broken turn is not recorded
    no_tracebacks(caplog)


# -- hangs and cut-off requests ------------------------------------------------------------------
async def test_an_engine_silent_past_the_read_timeout_is_infra(smollm2_tokenizer, caplog):
    tok = smollm2_tokenizer
    async with engine_and_gateway(tok, then=EngineReply.hang(), read_timeout=1.0) as (engine, gw), \
            httpx.AsyncClient(timeout=30) as c:
        start = time.monotonic()
        r = await c.post(gw.session_base_url("s") + "/chat/completions", json=HI)
        s = await c.post(gw.session_base_url("t") + "/chat/completions", json={**HI, "stream": True})
        took = time.monotonic() - start
        await asyncio.sleep(0.2)
        gone = [q.client_went_away for q in engine.requests]
    openai_error(r, 504, "engine_timeout")
    openai_error(s, 504, "engine_timeout")
    assert took < 5 and len(engine.requests) == 2  # a hang is not retried
    assert gone == [True, True]  # the gateway let go of the engine request
    for sid in ("s", "t"):
        assert isinstance(gw.session_error(sid), EngineTimeoutError) and gw.session_error(sid).error_class == "infra"
    no_tracebacks(caplog)


async def until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.01)


async def test_a_request_open_when_the_turn_ends_on_a_stuck_engine_is_infra_until_a_later_one_starts(
        smollm2_tokenizer, caplog):
    tok = smollm2_tokenizer
    async with engine_and_gateway(tok, then=EngineReply.hang(), **FAST_PROBES) as (engine, gw), \
            httpx.AsyncClient(timeout=30) as c:
        url = gw.session_base_url("s") + "/chat/completions"
        pending = asyncio.create_task(c.post(url, json=HI))
        await until(lambda: engine.requests)
        before_any_probe = gw.session_error("s")  # nothing says the engine is stuck yet
        await until(lambda: gw.liveness.failure() is not None)  # its probe went unanswered
        # the harness's turn is over while the gateway still waits on the engine
        still_open = gw.session_error("s")
        pending.cancel()  # the harness is cancelled: its connection closes
        with contextlib.suppress(asyncio.CancelledError):
            await pending
        await until(lambda: engine.requests[0].client_went_away and not gw.sessions["s"].inflight)
        cut_off = gw.session_error("s")
        unrecovered = gw.sessions["s"].unrecovered_error()
        # the engine recovers and the agent goes on: a later request it answers means the cut-off did not end the turn
        engine.then = EngineReply.ok("late")
        after = await c.post(url, json=HI)
        recovered = gw.session_error("s")
        probes = list(engine.probes)
    assert before_any_probe is None
    assert isinstance(still_open, EngineRequestInterruptedError) and still_open.error_class == "infra"
    msg = str(still_open)
    assert "an engine request was still open when the agent's turn ended and the engine did not answer a probe" in msg
    assert "no answer within 0.5s" in msg and "waiting on the engine, the oldest for" in msg
    assert isinstance(cut_off, EngineRequestInterruptedError) and "closed its connection" in str(cut_off)
    assert "did not answer a probe" in str(cut_off) and "after waiting" in str(cut_off)
    assert isinstance(unrecovered, EngineRequestInterruptedError)
    assert after.status_code == 200 and recovered is None
    assert [t.completion_ids for t in gw.trajectory("s").turns] == [encoder(tok)("late")]
    # the probes: 1-token completions of a 1-token prompt, never retried, never in a session's trajectory
    assert probes and all(p.body["max_tokens"] == 1 and len(p.body["prompt"]) == 1 for p in probes)
    assert all(p.client_went_away for p in probes[:-1])  # each unanswered one was let go after its timeout
    no_tracebacks(caplog)


async def test_a_request_open_when_the_turn_ends_on_an_answering_engine_is_the_models(smollm2_tokenizer, caplog):
    """A healthy engine that is merely slow on the agent's request (a long generation): no error at all."""
    tok = smollm2_tokenizer
    async with engine_and_gateway(tok, [EngineReply.ok("a very long answer", delay_s=60)], **FAST_PROBES) as (engine, gw), \
            httpx.AsyncClient(timeout=30) as c:
        url = gw.session_base_url("s") + "/chat/completions"
        pending = asyncio.create_task(c.post(url, json=HI))
        await until(lambda: gw.liveness.last_probe is not None and gw.liveness.last_probe.error is None)
        await asyncio.sleep(0.5)  # past a probe timeout: were the engine stuck, its probes would have failed by now
        still_open = gw.session_error("s")
        open_unrecovered = gw.sessions["s"].unrecovered_error()
        pending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pending
        await until(lambda: engine.requests[0].client_went_away and not gw.sessions["s"].inflight)
        cut_off = gw.session_error("s")
        cut_unrecovered = gw.sessions["s"].unrecovered_error()
        notes = gw.trajectory("s").notes
        probes = list(engine.probes)
    assert still_open is None and open_unrecovered is None
    assert cut_off is None and cut_unrecovered is None
    assert any("cut off" in n and "the engine was answering" in n for n in notes), notes
    assert len(engine.requests) == 1 and probes and all(p.body["max_tokens"] == 1 for p in probes)
    assert len(probes) <= 12, f"{len(probes)} probes in about a second: one per 0.2 s of engine silence at most"
    no_tracebacks(caplog)


async def test_a_request_cut_off_by_the_gateway_stopping_is_infra_even_on_an_answering_engine(smollm2_tokenizer):
    async with engine_and_gateway(smollm2_tokenizer, [EngineReply.ok("slow", delay_s=60)], **FAST_PROBES) as (engine, gw), \
            httpx.AsyncClient(timeout=30) as c:
        pending = asyncio.create_task(c.post(gw.session_base_url("s") + "/chat/completions", json={**HI, "stream": True}))
        await until(lambda: gw.liveness.last_probe is not None and gw.liveness.last_probe.error is None)
        assert gw.session_error("s") is None  # the engine answers: an open request alone is nothing
        await gw.stop()
        r = await asyncio.wait_for(pending, 5)
    openai_error(r, 503, "engine_request_interrupted")
    error = gw.session_error("s")
    assert isinstance(error, EngineRequestInterruptedError) and "the gateway stopped" in str(error)


async def test_stopping_does_not_wait_for_a_probe_in_flight(smollm2_tokenizer, caplog):
    async with engine_and_gateway(smollm2_tokenizer, then=EngineReply.hang(), probe_interval_s=0.2,
                                  probe_timeout_s=60) as (engine, gw), httpx.AsyncClient(timeout=30) as c:
        pending = asyncio.create_task(c.post(gw.session_base_url("s") + "/chat/completions", json=HI))
        await until(lambda: gw.liveness.probe_sent_at is not None and engine.probes)
        start = time.monotonic()
        await gw.stop()
        took = time.monotonic() - start
        await asyncio.wait_for(pending, 5)
        await until(lambda: engine.probes[0].client_went_away)
    assert took < 5, f"stopping took {took:.1f}s: it waited for the probe"
    assert gw.liveness.last_probe is None  # a probe cut off by the stop is no verdict on the engine
    no_tracebacks(caplog)


async def test_a_probe_the_engine_refuses_is_not_retried_and_makes_the_open_request_infra(smollm2_tokenizer):
    async with engine_and_gateway(smollm2_tokenizer, then=EngineReply.hang(), probe=EngineReply.unavailable(),
                                  **FAST_PROBES) as (engine, gw), httpx.AsyncClient(timeout=30) as c:
        pending = asyncio.create_task(c.post(gw.session_base_url("s") + "/chat/completions", json=HI))
        await until(lambda: gw.liveness.failure() is not None)
        first_failure = len(engine.probes)
        await asyncio.sleep(0.5)
        error = gw.session_error("s")
        probes = len(engine.probes)
        pending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pending
    assert first_failure == 1  # one attempt: a probe is never retried (the client would retry a 503 3 times)
    assert 2 <= probes <= 5, f"{probes} probes in 0.5 s: a failing engine is asked again once per 0.2 s"
    assert isinstance(error, EngineRequestInterruptedError) and error.error_class == "infra"
    assert "EngineUnavailableError" in str(error) and "after 1 attempt" in str(error)


async def test_an_infra_fault_the_agent_got_past_is_not_what_the_session_ended_on(smollm2_tokenizer):
    """``worst_error`` decides a failed attempt; ``unrecovered_error`` says whether a finished one ended on the engine."""
    tok = smollm2_tokenizer
    script = [EngineReply.unavailable(), EngineReply.ok("fine"), EngineReply.ok("fine"), EngineReply.rate_limited(retry_after=0)]
    async with engine_and_gateway(tok, script, retries=0) as (engine, gw), httpx.AsyncClient(timeout=30) as c:
        sessions = GatewaySessions(gw)
        async with sessions(types.SimpleNamespace(id="recovered")) as recovered, \
                sessions(types.SimpleNamespace(id="cut-short")) as cut_short:
            for s in (recovered, cut_short):
                first = await c.post(f"{s.policy.base_url}/chat/completions", json=HI)
                second = await c.post(f"{s.policy.base_url}/chat/completions", json=HI)
            assert (first.status_code, second.status_code) == (200, 429)
            assert isinstance(recovered.error(), EngineUnavailableError)  # decides the attempt if the harness failed
            assert recovered.unrecovered_error() is None  # the client retried and the next call worked
            assert isinstance(cut_short.error(), EngineRateLimitedError)
            assert isinstance(cut_short.unrecovered_error(), EngineRateLimitedError)  # its last call failed on infra
    async with engine_and_gateway(tok, max_model_len=30) as (engine, gw), httpx.AsyncClient(timeout=30) as c:
        url = gw.session_base_url("ctx") + "/chat/completions"
        r = await c.post(url, json={"messages": [{"role": "user", "content": "word " * 40}]})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        s = gw.sessions["ctx"]
        assert s.worst_error().error_class == "model" and s.unrecovered_error() is None  # the model's own doing


async def test_closing_a_session_or_stopping_cuts_off_open_requests_cleanly(smollm2_tokenizer, caplog):
    tok = smollm2_tokenizer
    async with engine_and_gateway(tok, then=EngineReply.hang()) as (engine, gw), httpx.AsyncClient(timeout=30) as c:
        closing = asyncio.create_task(c.post(gw.session_base_url("a") + "/chat/completions", json=HI))
        stopping = asyncio.create_task(c.post(gw.session_base_url("b") + "/chat/completions", json={**HI, "stream": True}))
        while len(engine.requests) < 2:
            await asyncio.sleep(0.01)
        gw.close_session("a")
        closed = await asyncio.wait_for(closing, 5)
        start = time.monotonic()
        await gw.stop()  # with a request still open: does not wait for the engine
        stopped = await asyncio.wait_for(stopping, 5)
        took = time.monotonic() - start
    openai_error(closed, 503, "engine_request_interrupted")
    assert "session was closed" in closed.json()["error"]["message"]
    openai_error(stopped, 503, "engine_request_interrupted")
    assert took < 5
    assert isinstance(gw.session_error("b"), EngineRequestInterruptedError)
    no_tracebacks(caplog)


async def test_a_client_that_disconnects_leaves_no_traceback(smollm2_tokenizer, caplog):
    caplog.set_level(logging.DEBUG, logger="uvicorn")
    caplog.set_level(logging.INFO, logger="tackroom_gateway")
    tok = smollm2_tokenizer
    text = "a fairly long answer " * 10
    script = [EngineReply.ok("x", delay_s=1.0), EngineReply.ok("x", delay_s=1.0), EngineReply.ok(text)]
    async with engine_and_gateway(tok, script) as (engine, gw):
        url = gw.session_base_url("s") + "/chat/completions"
        for body in (HI, {**HI, "stream": True}):
            async with httpx.AsyncClient(timeout=30) as c:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.3):
                        if body.get("stream"):
                            async with c.stream("POST", url, json=body) as r:
                                async for _ in r.aiter_lines():
                                    pass
                        else:
                            await c.post(url, json=body)
        # and one that hangs up after the first streamed event
        async with httpx.AsyncClient(timeout=30) as c, c.stream("POST", url, json={**HI, "stream": True}) as r:
            async for _line in r.aiter_lines():
                break
        await asyncio.sleep(1.5)  # whatever the gateway does after the disconnects happens now
        assert all(q.client_went_away for q in engine.requests[:2])
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert errors == [], [r.getMessage() for r in errors]
    no_tracebacks(caplog)


async def test_bad_client_requests_and_unknown_sessions_are_openai_errors(smollm2_tokenizer, caplog):
    tok = smollm2_tokenizer
    async with engine_and_gateway(tok) as (engine, gw), httpx.AsyncClient(base_url=gw.base_url, timeout=30) as c:
        url = gw.session_base_url("s") + "/chat/completions"
        cases = {
            "not json": await c.post(url, content=b"{nope"),
            "not an object": await c.post(url, json=[1, 2]),
            "messages wrong": await c.post(url, json={"messages": "hi"}),
            "no messages": await c.post(url, json={"messages": []}),
            "role missing": await c.post(url, json={"messages": [{"content": "hi"}]}),
            "content an object": await c.post(url, json={"messages": [{"role": "user", "content": {"a": 1}}]}),
            "tool_calls not a list": await c.post(url, json={"messages": [
                {"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": 5}]}),
            "a tool call without a name": await c.post(url, json={"messages": [
                {"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]}),
            "tool_calls as a string": await c.post(url, json={"messages": [
                {"role": "user", "content": "hi", "tool_calls": "zz"}]}),
        }
        for what, r in cases.items():
            assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request", (what, r.text)
        unknown = await c.post("/sessions/nobody/abc/v1/chat/completions", json=HI)
        no_route = await c.get("/nowhere")
        wrong_method = await c.get(url)
    openai_error(unknown, 404, "session_not_found")
    openai_error(no_route, 404, "not_found")
    openai_error(wrong_method, 405, "method_not_allowed")
    assert engine.requests == [] and gw.session_error("s") is None  # bad requests are not the engine's or the model's
    no_tracebacks(caplog)


# -- through the trial runtime ------------------------------------------------------------------------
class AskOnceHarness(tackroom.Harness):
    """A chat harness that blames the model for anything that goes wrong, as careless harnesses do."""

    name = "ask-once"
    capabilities = frozenset({"chat", "needs_policy"})

    async def run(self, task, sandbox, policy):
        async with httpx.AsyncClient(timeout=120) as client:
            r = await client.post(f"{policy.base_url}/chat/completions",
                                  json={"model": policy.model, "messages": [{"role": "user", "content": task.instruction}]})
        if r.status_code != 200:
            raise ModelError(f"the model call failed: HTTP {r.status_code} {r.text[:200]}")
        answer = r.json()["choices"][0]["message"]["content"]
        if "solved" not in answer:
            raise ModelError(f"the model did not solve it: {answer!r}")
        return tackroom.Trajectory(final_answer=answer)


class EmptySandbox(Sandbox):
    """Nothing runs in it: these trials are about the engine, not about what an agent leaves behind."""

    async def start(self) -> None:
        pass

    async def exec(self, cmd, *, cwd=None, env=None, timeout=60.0, stdin=None) -> ExecResult:
        return ExecResult(exit_code=0)

    async def upload(self, source, dest, *, timeout=120.0) -> None:
        pass

    async def download(self, source, dest, *, timeout=120.0) -> None:
        raise FileNotFoundError(source)

    async def kill_processes(self, *, timeout: float = 10.0) -> None:
        pass  # the agent here is an in-process harness: there is nothing to kill

    async def stop(self) -> None:
        pass


class EmptySandboxes(SandboxProvider):
    name = "empty"

    def create(self, spec) -> Sandbox:
        return EmptySandbox(spec)


class ZeroVerifier(tackroom.Verifier):
    """Grades every episode 0: a model failure must show up as reward 0, an infra failure as no reward."""

    name = "zero"

    async def verify(self, task, sandbox, trajectory) -> tackroom.Reward:
        return tackroom.Reward(score=0.0)


async def run_one_trial(tmp_path, gw: PolicyGateway, agent_timeout_s: float, harness: type[tackroom.Harness] | None = None):
    harness = harness or AskOnceHarness
    d = tmp_path / "tasks" / "t"
    d.mkdir(parents=True)
    (d / "instruction.md").write_text("Solve it.")
    (d / "task.toml").write_text(f"[agent]\ntimeout_sec = {agent_timeout_s}\n")
    task = tackroom.load_task(d)
    plugins = TrialPlugins(harness, harness.Options(), EmptySandboxes(), ZeroVerifier, ZeroVerifier.Options())
    plugins.policy_for = GatewaySessions(gw)
    trial = Trial(task_id=task.id, task_path=str(task.path), harness=harness.name, sandbox="empty", verifier="zero")
    runtime = TrialRuntime(tmp_path / "run", attempts=1, progress=False, manager=tackroom_app.PluginManager())
    return await runtime.run_trial(trial, task, plugins)


async def test_a_rate_limited_engine_ends_the_trial_infra_not_model(tmp_path, smollm2_tokenizer):
    async with engine_and_gateway(smollm2_tokenizer, then=EngineReply.rate_limited(retry_after=0)) as (_, gw):
        result = await run_one_trial(tmp_path, gw, agent_timeout_s=60)
    assert result.error is not None and result.error.error_class == "infra", result.error
    assert result.error.type == "EngineRateLimitedError" and result.reward is None
    assert gw.sessions == {}  # the attempt's session was closed


async def test_an_engine_hanging_past_the_agent_timeout_ends_the_trial_infra(tmp_path, smollm2_tokenizer):
    async with engine_and_gateway(smollm2_tokenizer, then=EngineReply.hang(), **FAST_PROBES) as (engine, gw):
        result = await run_one_trial(tmp_path, gw, agent_timeout_s=2)
        for _ in range(100):
            if engine.requests and engine.requests[0].client_went_away:
                break
            await asyncio.sleep(0.02)
        went_away = [q.client_went_away for q in engine.requests]
    assert result.error is not None and result.error.error_class == "infra", result.error
    assert result.error.type == "EngineRequestInterruptedError" and result.reward is None
    assert "an engine request was still open when the agent's turn ended" in result.error.message
    assert "did not answer a probe" in result.error.message and "no answer within 0.5s" in result.error.message
    assert went_away == [True]  # the gateway let go of the engine request
    assert engine.probes  # it was the engine's silence to the probes that decided


async def test_a_long_generation_on_a_healthy_engine_past_the_agent_timeout_stays_model(tmp_path, smollm2_tokenizer):
    """The policy stalls (a long answer, a loop) on an engine that answers: the timeout is the model's failure,
    graded (reward 0), not an infra error that would be retried and never trained on."""
    async with engine_and_gateway(smollm2_tokenizer, [EngineReply.ok("solved, eventually", delay_s=60)],
                                  **FAST_PROBES) as (engine, gw):
        result = await run_one_trial(tmp_path, gw, agent_timeout_s=2)
        for _ in range(100):
            if engine.requests and engine.requests[0].client_went_away:
                break
            await asyncio.sleep(0.02)
        went_away = [q.client_went_away for q in engine.requests]
        answered_probes = [p for p in engine.probes if not p.client_went_away]
    assert result.error is not None and result.error.error_class == "model", result.error
    assert result.error.type == "AgentTimeoutError" and result.reward == 0.0
    assert went_away == [True]  # the agent's request was open when its turn ended
    assert answered_probes  # and the engine answered the gateway's probes meanwhile


class LoopStallingHarness(tackroom.Harness):
    """A harness whose own code stalls this process's event loop (a long synchronous call) while its request
    waits on a healthy engine: the liveness probe in flight then comes back long past its limit."""

    name = "loop-staller"
    capabilities = frozenset({"chat", "needs_policy"})
    liveness: EngineLiveness | None = None
    """The gateway's liveness watch, so that the stall begins while a probe is on its way."""

    async def run(self, task, sandbox, policy):
        async with httpx.AsyncClient(timeout=120) as client:
            ask = asyncio.create_task(client.post(f"{policy.base_url}/chat/completions", json={
                "model": policy.model, "messages": [{"role": "user", "content": task.instruction}]}))
            while self.liveness is None or self.liveness.probe_sent_at is None:
                await asyncio.sleep(0.005)
            time.sleep(2.5)  # the stall: nothing in this process runs, the probe's 0.5 s deadline passes unseen
            await ask
        raise ModelError("not expected to finish")


async def test_a_stall_of_our_own_event_loop_is_not_taken_for_a_silent_engine(tmp_path, smollm2_tokenizer):
    """A probe whose deadline passed while this process stood still says nothing about the engine: counting it
    would make the trial infra (retried, never trained on), and code inside the trial could cause it."""
    async with engine_and_gateway(smollm2_tokenizer, [EngineReply.ok("solved, eventually", delay_s=60)],
                                  probe=EngineReply.ok("ok", delay_s=0.2), **FAST_PROBES) as (engine, gw):
        LoopStallingHarness.liveness = gw.liveness
        result = await run_one_trial(tmp_path, gw, agent_timeout_s=2, harness=LoopStallingHarness)
        stalls = gw.liveness.stalls
    assert stalls >= 1, result.error  # the stall was seen, and the probe it spoiled was set aside
    assert result.error is not None and result.error.error_class == "model", result.error
    assert result.error.type == "AgentTimeoutError" and result.reward == 0.0


async def test_an_engine_hanging_past_its_read_timeout_ends_the_trial_infra(tmp_path, smollm2_tokenizer):
    async with engine_and_gateway(smollm2_tokenizer, then=EngineReply.hang(), read_timeout=1.0) as (_, gw):
        result = await run_one_trial(tmp_path, gw, agent_timeout_s=60)
    assert result.error is not None and result.error.error_class == "infra" and result.error.type == "EngineTimeoutError"


async def test_the_models_own_failure_stays_model(tmp_path, smollm2_tokenizer):
    """The control: a healthy engine and a wrong answer is the model's failure, with reward 0."""
    async with engine_and_gateway(smollm2_tokenizer, then=EngineReply.ok("I give up")) as (_, gw):
        result = await run_one_trial(tmp_path, gw, agent_timeout_s=60)
    assert result.error is not None and result.error.error_class == "model" and result.reward == 0.0


async def test_the_misbehaving_engine_speaks_chat_to_harnesses_directly():
    """Harness tests point an OpenAI client straight at it: chat completions, plain and streamed, and its faults."""
    openai = pytest.importorskip("openai")
    script = [EngineReply.rate_limited(retry_after=0), EngineReply.ok("Hi there."), EngineReply.ok("Streamed."),
              EngineReply.close(), EngineReply.non_json()]
    async with MisbehavingEngine(script) as engine:
        client = openai.AsyncOpenAI(base_url=engine.base_url, api_key="x", max_retries=1)
        reply = await client.chat.completions.create(model=engine.model, messages=HI["messages"])  # the SDK retries the 429
        stream = await client.chat.completions.create(model=engine.model, messages=HI["messages"], stream=True)
        streamed = "".join([ch.choices[0].delta.content or "" async for ch in stream if ch.choices])
        strict = openai.AsyncOpenAI(base_url=engine.base_url, api_key="x", max_retries=0)
        with pytest.raises(openai.APIConnectionError):
            await strict.chat.completions.create(model=engine.model, messages=HI["messages"])
        garbled = await httpx.AsyncClient(timeout=10).post(f"{engine.base_url}/chat/completions", json=HI)
    assert reply.choices[0].message.content == "Hi there." and streamed == "Streamed."
    assert [r.reply.kind for r in engine.requests] == ["status", "ok", "ok", "close", "raw"]
    assert [r.path for r in engine.requests] == ["/v1/chat/completions"] * 5
    assert garbled.status_code == 200 and garbled.text.startswith("<html>")


SLOW_PROBES = {"probe_interval_s": 60.0, "probe_timeout_s": 0.5}
"""The watch would first probe after 60 s of silence: any verdict in a shorter turn comes from the last probe."""


async def test_an_engine_hanging_past_an_agent_timeout_shorter_than_the_probe_interval_is_infra(tmp_path, smollm2_tokenizer):
    async with engine_and_gateway(smollm2_tokenizer, then=EngineReply.hang(), **SLOW_PROBES) as (engine, gw):
        result = await run_one_trial(tmp_path, gw, agent_timeout_s=1)
        probes = len(engine.probes)
    assert result.error is not None and result.error.error_class == "infra", result.error
    assert result.error.type == "EngineRequestInterruptedError" and result.reward is None
    assert "no answer within 0.5s" in result.error.message
    assert probes == 1  # the one last probe decided


async def test_a_long_generation_past_a_short_agent_timeout_on_a_healthy_engine_stays_model(tmp_path, smollm2_tokenizer):
    async with engine_and_gateway(smollm2_tokenizer, [EngineReply.ok("solved, eventually", delay_s=60)],
                                  **SLOW_PROBES) as (engine, gw):
        result = await run_one_trial(tmp_path, gw, agent_timeout_s=1)
        probes = len(engine.probes)
    assert result.error is not None and result.error.error_class == "model", result.error
    assert result.error.type == "AgentTimeoutError" and result.reward == 0.0
    assert probes == 1  # asked, and it answered
