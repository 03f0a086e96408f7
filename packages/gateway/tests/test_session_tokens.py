"""An agent reaches only its own gateway session: session URLs carry an unguessable token, and
listing, reading or deleting other sessions needs the gateway's admin token.

Real gateway over real HTTP with SmolLM2's real tokenizer; the engine is
``tackroom_gateway.testing.MisbehavingEngine`` behaving well.
"""

from __future__ import annotations

import contextlib
import os
import re
import types
from collections.abc import AsyncIterator

import httpx
import pytest

from tackroom_gateway import ChatTemplate, EngineSettings, GatewaySettings, PolicyGateway
from tackroom_gateway.testing import EngineReply, MisbehavingEngine
from tackroom_gateway.trial_sessions import GatewaySessions

HI = {"messages": [{"role": "user", "content": "hi"}]}
TOKEN = r"[A-Za-z0-9_-]{32}"


@contextlib.asynccontextmanager
async def gateway(tok, reply: str = "Hello there.") -> AsyncIterator[PolicyGateway]:
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    async with MisbehavingEngine(then=EngineReply.ok(reply), model="smollm2",
                                 encode=lambda text: tok.encode(text, add_special_tokens=False) + [eot]) as engine:
        gw = PolicyGateway(GatewaySettings(engine=EngineSettings(base_url=engine.base_url, backoff_s=0.01)),
                           template=ChatTemplate(tok))
        async with gw:
            yield gw


def path_of(gw: PolicyGateway, url: str) -> str:
    return url.removeprefix(gw.base_url)


async def test_a_session_url_works_only_with_its_own_token(smollm2_tokenizer):
    async with gateway(smollm2_tokenizer) as gw, httpx.AsyncClient(base_url=gw.base_url, timeout=30) as c:
        a, b = gw.session_base_url("a"), gw.session_base_url("b")
        assert re.fullmatch(rf"{re.escape(gw.base_url)}/sessions/a/{TOKEN}/v1", a)
        assert gw.session_base_url("a") == a and gw.policy("a").base_url == a  # stable for the session's life
        a_token, b_token = a.split("/")[-2], b.split("/")[-2]
        assert a_token != b_token

        ok = await c.post(f"{path_of(gw, a)}/chat/completions", json=HI)
        assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "Hello there."
        assert (await c.get(f"{path_of(gw, a)}/models")).status_code == 200
        own = await c.get(path_of(gw, a).removesuffix("/v1") + "/trajectory")
        assert own.status_code == 200 and len(own.json()["turns"]) == 1

        refused = {
            "no token (the old URL form)": await c.post("/sessions/a/v1/chat/completions", json=HI),
            "a wrong token": await c.post(f"/sessions/a/{'x' * 32}/v1/chat/completions", json=HI),
            "another session's token": await c.post(f"/sessions/a/{b_token}/v1/chat/completions", json=HI),
            "a token that differs in one character": await c.post(
                f"/sessions/a/{a_token[:-1]}{'A' if a_token[-1] != 'A' else 'B'}/v1/chat/completions", json=HI),
            "models, wrong token": await c.get(f"/sessions/a/{b_token}/v1/models"),
            "another session's trajectory with its own token": await c.get(f"/sessions/a/{b_token}/trajectory"),
            "a session that does not exist": await c.post(f"/sessions/zzz/{a_token}/v1/chat/completions", json=HI),
        }
        for what, r in refused.items():
            assert r.status_code == 404, (what, r.status_code, r.text)
            err = r.json()["error"]
            assert err["code"] in ("session_not_found", "not_found"), (what, err)
            assert a_token not in err["message"] and b_token not in err["message"] and "sessions so far" not in err["message"]
        assert len(gw.trajectory("a").turns) == 1 and gw.trajectory("b").turns == []  # nothing got through
        health = (await c.get("/health")).json()
        assert health["status"] == "ok" and "engine" not in health  # the engine's own URL is not advertised


async def test_listing_reading_and_deleting_sessions_needs_the_admin_token(smollm2_tokenizer):
    async with gateway(smollm2_tokenizer) as gw, httpx.AsyncClient(base_url=gw.base_url, timeout=30) as c:
        a = path_of(gw, gw.session_base_url("a"))
        a_token = a.split("/")[-2]
        admin = {"Authorization": f"Bearer {gw.admin_token}"}
        assert len(gw.admin_token) >= 40 and gw.admin_token != a_token
        assert (await c.post(f"{a}/chat/completions", json=HI)).status_code == 200

        for headers in ({}, {"Authorization": f"Bearer {a_token}"}, {"Authorization": f"Basic {gw.admin_token}"},
                        {"Authorization": "Bearer"}, {"Authorization": f"Bearer {gw.admin_token[:-1]}"}):
            for method, url in (("GET", "/sessions"), ("POST", "/sessions"), ("GET", "/sessions/a/trajectory"),
                                ("DELETE", "/sessions/a"), ("POST", "/v1/chat/completions")):
                r = await c.request(method, url, headers=headers, json=HI if "chat" in url else None)
                assert r.status_code == 401, (method, url, headers, r.text)
                assert r.json()["error"]["code"] == "invalid_admin_token" and "Bearer" in r.headers["www-authenticate"]
        assert (await c.post(f"{a}/chat/completions", json=HI)).status_code == 200  # the refused DELETEs did nothing

        listed = (await c.get("/sessions", headers=admin)).json()
        assert [(s["session_id"], s["turns"], s["open_requests"]) for s in listed] == [("a", 2, 0)]
        assert a_token not in str(listed)  # the admin listing does not hand out session tokens either
        traj = await c.get("/sessions/a/trajectory", headers=admin)
        assert traj.status_code == 200 and len(traj.json()["turns"]) == 2
        deleted = await c.delete("/sessions/a", headers=admin)
        assert deleted.status_code == 200 and len(deleted.json()["turns"]) == 2
        gone = await c.post(f"{a}/chat/completions", json=HI)
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "session_not_found"
        assert (await c.delete("/sessions/a", headers=admin)).status_code == 404

    other = PolicyGateway(gw.settings)
    assert other.admin_token != gw.admin_token  # random per gateway


async def test_an_outside_client_gets_a_session_from_post_sessions(smollm2_tokenizer):
    openai = pytest.importorskip("openai")
    async with gateway(smollm2_tokenizer) as gw, httpx.AsyncClient(base_url=gw.base_url, timeout=30) as c:
        admin = {"Authorization": f"Bearer {gw.admin_token}"}
        made = await c.post("/sessions", headers=admin)
        assert made.status_code == 201
        body = made.json()
        assert set(body) == {"session_id", "base_url", "trajectory_url"}
        assert re.fullmatch(rf"{re.escape(gw.base_url)}/sessions/{body['session_id']}/{TOKEN}/v1", body["base_url"])
        named = await c.post("/sessions", json={"session_id": "mine"}, headers=admin)
        again = await c.post("/sessions", json={"session_id": "mine"}, headers=admin)
        assert named.status_code == 201 and again.status_code == 200 and again.json() == named.json()
        for bad in ({"session_id": "../up"}, {"session_id": ".."}, {"session_id": "a/b"}, {"session_id": "x" * 513},
                    {"session_id": 7}, [1]):
            r = await c.post("/sessions", json=bad, headers=admin)
            assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request", (bad, r.text)
        assert (await c.post("/sessions", content=b"{oops", headers=admin)).status_code == 400

        # the base URL is all an OpenAI client needs: the token travels in the path, any api key will do
        client = openai.AsyncOpenAI(base_url=body["base_url"], api_key="anything", max_retries=0)
        reply = await client.chat.completions.create(model="smollm2", messages=HI["messages"])
        assert reply.choices[0].message.content == "Hello there."
        stream = await client.chat.completions.create(model="smollm2", messages=HI["messages"], stream=True)
        assert "".join([ch.choices[0].delta.content or "" async for ch in stream if ch.choices]) == "Hello there."
        assert [m.id for m in (await client.models.list()).data] == ["smollm2"]
        wrong = openai.AsyncOpenAI(base_url=body["base_url"].replace(body["base_url"].split("/")[-2], "x" * 32),
                                   api_key=gw.admin_token, max_retries=0)
        with pytest.raises(openai.NotFoundError):  # not even with the admin token as the api key
            await wrong.chat.completions.create(model="smollm2", messages=HI["messages"])
        traj = (await c.get(body["trajectory_url"])).json()
        assert len(traj["turns"]) == 2


async def test_litellm_reaches_a_session_by_its_base_url(smollm2_tokenizer):
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch on import
    litellm = pytest.importorskip("litellm")
    async with gateway(smollm2_tokenizer) as gw:
        url = gw.session_base_url("lite")
        reply = await litellm.acompletion(model="openai/smollm2", api_base=url, api_key="EMPTY",
                                          messages=HI["messages"], max_retries=0)
        assert reply.choices[0].message.content == "Hello there."
        assert len(gw.trajectory("lite").turns) == 1


async def test_each_trial_attempt_gets_its_own_token_and_loses_it_afterwards(smollm2_tokenizer):
    async with gateway(smollm2_tokenizer) as gw, httpx.AsyncClient(timeout=30) as c:
        sessions = GatewaySessions(gw)
        trial = types.SimpleNamespace(id="task-1__h__p0")
        async with sessions(trial) as first:
            url = first.policy.base_url
            assert re.fullmatch(rf"{re.escape(gw.base_url)}/sessions/task-1__h__p0-[0-9a-f]{{8}}/{TOKEN}/v1", url)
            assert (await c.post(f"{url}/chat/completions", json=HI)).status_code == 200
            assert first.error() is None
        async with sessions(trial) as second:
            assert second.policy.base_url != url
            assert second.policy.base_url.split("/")[-2] != url.split("/")[-2]
        after = await c.post(f"{url}/chat/completions", json=HI)
        assert after.status_code == 404  # a finished attempt's agent cannot write into the gateway any more
        assert gw.sessions == {}
