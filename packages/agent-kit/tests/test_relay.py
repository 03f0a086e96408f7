"""The model relay between an agent in the sandbox and the policy: every dialect passes byte for byte, model calls
are counted and limited, and the refusal speaks the caller's dialect."""

from __future__ import annotations

import json

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tackroom_agent_kit import ModelRelay, is_model_call, policy_root
from tackroom_gateway import InLoopServer


async def echo(request: Request) -> JSONResponse:
    return JSONResponse({"path": request.url.path, "query": request.url.query, "body": (await request.body()).decode()})


def test_model_calls_are_told_from_other_requests():
    assert is_model_call("POST", "sessions/s/t/v1/chat/completions")
    assert is_model_call("POST", "v1/responses")
    assert is_model_call("POST", "v1/messages")
    assert is_model_call("POST", "v1beta/models/smollm2:streamGenerateContent")
    assert not is_model_call("POST", "v1/messages/count_tokens")
    assert not is_model_call("POST", "v1beta/models/smollm2:countTokens")
    assert not is_model_call("GET", "v1/models")
    assert policy_root("http://h:1/sessions/a/b/v1/") == "http://h:1/sessions/a/b"
    assert policy_root("http://h:1/sessions/a/b") == "http://h:1/sessions/a/b"


async def test_every_dialect_passes_and_the_turn_limit_answers_in_the_callers_shape():
    upstream = InLoopServer(Starlette(routes=[Route("/{path:path}", echo, methods=["GET", "POST"])]), what="upstream")
    port = await upstream.start()
    try:
        async with ModelRelay(f"http://127.0.0.1:{port}/sessions/s1/tok/v1", max_calls=3) as relay, \
                httpx.AsyncClient(base_url=relay.root_url) as client:
            r = await client.post("/v1/messages?beta=true", content=b'{"x": 1}')
            assert r.json() == {"path": "/sessions/s1/tok/v1/messages", "query": "beta=true", "body": '{"x": 1}'}
            assert (await client.post("/v1/messages/count_tokens", content=b"{}")).status_code == 200
            assert (await client.post("/v1/responses", content=b"{}")).status_code == 200
            r = await client.post("/v1beta/models/m:streamGenerateContent?alt=sse", content=b"{}")
            assert r.json()["path"] == "/sessions/s1/tok/v1beta/models/m:streamGenerateContent"
            assert relay.calls == 3 and not relay.limit_reached
            refused = {
                "/v1/chat/completions": lambda b: b["error"]["code"] == "tackroom_turn_limit",
                "/v1/responses": lambda b: b["error"]["code"] == "tackroom_turn_limit",
                "/v1/messages": lambda b: b["type"] == "error" and b["error"]["type"] == "invalid_request_error",
                "/v1beta/models/m:generateContent": lambda b: b["error"]["status"] == "INVALID_ARGUMENT",
            }
            for path, shaped in refused.items():
                r = await client.post(path, content=b"{}")
                assert r.status_code == 400 and shaped(r.json()), (path, r.text)
                assert "turn limit (3 model calls)" in r.text
            assert relay.calls == 3 and relay.refused == 4 and relay.limit_reached
            assert (await client.get("/v1/models")).status_code == 200  # not a call: still passes
    finally:
        await upstream.stop()


async def test_fill_changes_model_calls_only_and_never_a_body_that_is_not_json():
    upstream = InLoopServer(Starlette(routes=[Route("/{path:path}", echo, methods=["GET", "POST"])]), what="upstream")
    port = await upstream.start()

    def fill(path: str, doc: dict) -> dict:
        return {**doc, "filled_for": path}

    try:
        async with ModelRelay(f"http://127.0.0.1:{port}/v1", max_calls=None, fill=fill) as relay, \
                httpx.AsyncClient(base_url=relay.root_url) as client:
            r = await client.post("/v1/responses", json={"input": "hi"})
            assert json.loads(r.json()["body"]) == {"input": "hi", "filled_for": "v1/responses"}
            r = await client.post("/v1/messages/count_tokens", json={"x": 1})  # not a model call
            assert json.loads(r.json()["body"]) == {"x": 1}
            r = await client.post("/v1/chat/completions", content=b"not json")
            assert r.json()["body"] == "not json"
    finally:
        await upstream.stop()
