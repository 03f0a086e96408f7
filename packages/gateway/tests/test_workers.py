"""``tackroom gateway --workers N``: one address, N gateway processes, every session in exactly one of them.

The engine is FakeEngineForTests (its docstring says why a double): each answer's ids are chosen from the prompt
it got, so a session's trajectory can be checked token for token against what the engine returned. The workers
are real processes (``python -m tackroom_gateway.worker_process``), each loading the real SmolLM2 tokenizer.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from fake_engine import FakeEngineForTests, Scripted, serve_app

from tackroom_gateway import EngineSettings, GatewaySettings, GatewayWorkers, PolicyGateway, WorkersSettings
from tackroom_gateway.pinning import DEFAULT_SESSION, owner, request_path, session_of


def answer_ids(tok, prompt: list[int]) -> list[int]:
    """What the fake engine answers a prompt: a text naming its length, so every turn's answer is its own."""
    return tok.encode(f"Answer {len(prompt)}.", add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]


def sid_on(worker: int, prefix: str) -> str:
    """A session id the hash puts on ``worker`` of two."""
    return next(f"{prefix}-{i}" for i in range(1000) if owner(f"{prefix}-{i}", 2) == worker)


async def sse_text(client: httpx.AsyncClient, url: str, body: dict) -> tuple[str, list[float]]:
    """A streamed chat completion's text and when each piece of it arrived."""
    text, arrivals = "", []
    async with client.stream("POST", url, json={**body, "stream": True}) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                piece = json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                if piece:
                    text += piece
                    arrivals.append(time.monotonic())
    return text, arrivals


# Worker processes load transformers (seconds each): one front with two workers, in this module's event loop,
# serves the tests that leave it as they found it.
@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(smollm2_tokenizer):
    """The fake engine and a front with two workers in front of it."""
    fake = FakeEngineForTests(smollm2_tokenizer, model="smollm2")
    fake.default = lambda prompt: Scripted(completion_ids=answer_ids(smollm2_tokenizer, prompt))
    async with serve_app(fake.app) as engine_url:
        settings = GatewaySettings(engine=EngineSettings(base_url=engine_url, backoff_s=0.01), tokenizer="smollm2")
        async with GatewayWorkers(settings, WorkersSettings(workers=2, peek_timeout_s=3.0)) as front:
            yield fake, front


def admin(front: GatewayWorkers) -> dict[str, str]:
    return {"Authorization": f"Bearer {front.admin_token}"}


async def check_token_exact(client: httpx.AsyncClient, front: GatewayWorkers, fake: FakeEngineForTests, tok,
                            sid: str, turns: int) -> None:
    """The session's trajectory is what the engine was sent and returned, turn by turn, each turn continuing the
    last one's exact ids."""
    traj = (await client.get(f"{front.base_url}/sessions/{sid}/trajectory", headers=admin(front))).json()
    assert len(traj["turns"]) == turns, traj["turns"]
    sent = [r["prompt"] for r in fake.requests]
    for k, turn in enumerate(traj["turns"]):
        assert turn["prompt_ids"] in sent
        assert turn["completion_ids"] == answer_ids(tok, turn["prompt_ids"])
        if k:
            before = traj["turns"][k - 1]
            assert turn["prompt_ids"][: len(before["prompt_ids"]) + len(before["completion_ids"])] == \
                before["prompt_ids"] + before["completion_ids"]
    last = traj["turns"][-1]
    assert traj["token_ids"] == last["prompt_ids"] + last["completion_ids"]


async def converse(client: httpx.AsyncClient, base_url: str, turns: int, *, stream_every: int = 2) -> None:
    messages: list[dict] = []
    for k in range(turns):
        messages.append({"role": "user", "content": f"Turn {k}: tell me about saddles."})
        body = {"messages": messages}
        if k % stream_every == 1:
            text, _ = await sse_text(client, f"{base_url}/chat/completions", body)
        else:
            r = await client.post(f"{base_url}/chat/completions", json=body)
            assert r.status_code == 200, r.text
            text = r.json()["choices"][0]["message"]["content"]
        assert re.fullmatch(r"Answer \d+\.", text), text
        messages.append({"role": "assistant", "content": text})


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_sessions_land_on_their_owners_and_every_turn_is_token_exact(served, smollm2_tokenizer):
    fake, front = served
    async with httpx.AsyncClient(timeout=60) as c:
        named = [f"exact-{i}" for i in range(6)]
        made = [(await c.post(f"{front.base_url}/sessions", json={"session_id": sid}, headers=admin(front)))
                for sid in named]
        made += [(await c.post(f"{front.base_url}/sessions", headers=admin(front))) for _ in range(4)]
        assert [r.status_code for r in made] == [201] * 10, [r.text for r in made]
        sessions = [r.json() for r in made]
        for s in sessions:  # the URLs name the one public address, wherever the session lives
            assert s["base_url"] == f"{front.base_url}/sessions/{s['session_id']}/{s['base_url'].split('/')[-2]}/v1"
        await asyncio.gather(*(converse(c, s["base_url"], 3) for s in sessions))
        listed = (await c.get(f"{front.base_url}/sessions", headers=admin(front))).json()
        where = {row["session_id"]: row["worker"] for row in listed}
        for s in sessions:
            assert where[s["session_id"]] == owner(s["session_id"], 2)
            await check_token_exact(c, front, fake, smollm2_tokenizer, s["session_id"], 3)
    assert sorted(set(where.values())) == [0, 1]  # both workers hold sessions


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_one_keep_alive_connection_serves_sessions_of_both_workers(served, smollm2_tokenizer):
    fake, front = served
    on0, on1 = sid_on(0, "kept"), sid_on(1, "kept")
    async with httpx.AsyncClient(timeout=60) as setup:
        urls = {sid: (await setup.post(f"{front.base_url}/sessions", json={"session_id": sid},
                                       headers=admin(front))).json() for sid in (on0, on1)}
    before = front.handed_off
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=1)) as c:
        assert (await c.get(urls[on0]["trajectory_url"])).status_code == 200  # the connection goes to worker 0
        await converse(c, urls[on1]["base_url"], 2)  # ... so worker 0 forwards these to worker 1
        await converse(c, urls[on0]["base_url"], 2)
        # a stream forwarded between workers arrives as the engine sends it, not buffered whole
        fake.push(Scripted(completion_ids=answer_ids(smollm2_tokenizer, [0] * 7), token_delay_s=0.3))
        text, arrivals = await sse_text(c, urls[on1]["base_url"] + "/chat/completions",
                                        {"messages": [{"role": "user", "content": "Stream it."}]})
        assert text == "Answer 7."
        assert arrivals[-1] - arrivals[0] > 0.6, arrivals
        assert (await c.post(f"{front.base_url}/sessions", json={"session_id": on1}, headers=admin(front))).status_code == 200
    assert [a - b for a, b in zip(front.handed_off, before)] == [1, 0]  # one connection, in worker 0
    async with httpx.AsyncClient(timeout=60) as c:
        await check_token_exact(c, front, fake, smollm2_tokenizer, on0, 2)
        traj = (await c.get(f"{front.base_url}/sessions/{on1}/trajectory", headers=admin(front))).json()
        assert [t["completion_ids"] for t in traj["turns"][:2]] == \
            [answer_ids(smollm2_tokenizer, t["prompt_ids"]) for t in traj["turns"][:2]]


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_an_agent_cannot_reach_a_session_on_another_worker_with_its_own_token(served):
    # A hostile agent holds its own session's URL (worker 0) and keeps its connection there: it asks for another
    # session (worker 1) with its own token, and without the admin token. The forwarded request meets the owner's
    # own checks: 404 and 401 as a single gateway answers, no engine call, the victim's trajectory untouched.
    fake, front = served
    mine, victim = sid_on(0, "hostile"), sid_on(1, "victim")
    async with httpx.AsyncClient(timeout=60) as setup:
        urls = {sid: (await setup.post(f"{front.base_url}/sessions", json={"session_id": sid},
                                       headers=admin(front))).json() for sid in (mine, victim)}
        await converse(setup, urls[victim]["base_url"], 1)
    my_token = urls[mine]["base_url"].split("/")[-2]
    calls = len(fake.requests)
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=1)) as c:
        assert (await c.get(urls[mine]["trajectory_url"])).status_code == 200  # the connection is in worker 0
        forged = f"{front.base_url}/sessions/{victim}/{my_token}/v1"
        r = await c.post(f"{forged}/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 404 and r.json()["error"]["type"], r.text
        assert (await c.get(f"{front.base_url}/sessions/{victim}/{my_token}/trajectory")).status_code == 404
        assert (await c.get(f"{front.base_url}/sessions/{victim}/trajectory")).status_code == 401
        assert (await c.delete(f"{front.base_url}/sessions/{victim}")).status_code == 401
    assert len(fake.requests) == calls
    async with httpx.AsyncClient(timeout=60) as c:
        traj = (await c.get(f"{front.base_url}/sessions/{victim}/trajectory", headers=admin(front))).json()
        assert len(traj["turns"]) == 1


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_admin_routes_answer_for_every_worker(served, smollm2_tokenizer):
    fake, front = served
    on0, on1 = sid_on(0, "admin"), sid_on(1, "admin")
    async with httpx.AsyncClient(base_url=front.base_url, timeout=60) as c:
        assert (await c.get("/sessions")).status_code == 401  # no admin token: every worker refuses, so does the answer
        assert (await c.post("/weights/pause")).status_code == 401
        bases = {sid: (await c.post("/sessions", json={"session_id": sid}, headers=admin(front))).json()["base_url"]
                 for sid in (on0, on1)}
        listed = {row["session_id"]: row["worker"] for row in (await c.get("/sessions", headers=admin(front))).json()}
        assert listed[on0] == 0 and listed[on1] == 1
        assert (await c.post("/weights/pause", json={"mode": "sideways"}, headers=admin(front))).status_code == 400

        paused = (await c.post("/weights/pause", json={"mode": "finish"}, headers=admin(front))).json()
        assert paused["paused"] and [w["paused"] for w in paused["workers"]] == [True, True]
        held = [asyncio.ensure_future(c.post(f"{bases[sid]}/chat/completions",
                                             json={"messages": [{"role": "user", "content": "Held?"}]}))
                for sid in (on0, on1)]
        for _ in range(200):  # each worker holds its own session's call
            state = (await c.get("/weights", headers=admin(front))).json()
            if [w["waiting"] for w in state["workers"]] == [1, 1]:
                break
            await asyncio.sleep(0.05)
        assert [w["waiting"] for w in state["workers"]] == [1, 1] and state["waiting"] == 2, state
        assert not any(h.done() for h in held)

        resumed = (await c.post("/weights/resume", json={"policy_version": 7}, headers=admin(front))).json()
        assert resumed["policy_version"] == 7 and [w["policy_version"] for w in resumed["workers"]] == [7, 7]
        assert [(await h).status_code for h in held] == [200, 200]
        for sid in (on0, on1):
            traj = (await c.get(f"/sessions/{sid}/trajectory", headers=admin(front))).json()
            assert traj["turns"][-1]["policy_version"] == 7

        health = (await c.get("/health")).json()
        assert health["status"] == "ok" and [w["pid"] for w in health["workers"]] == front.pids
        assert (await c.delete(f"/sessions/{on1}", headers=admin(front))).status_code == 200  # on its owner
        assert (await c.get(f"/sessions/{on1}/trajectory", headers=admin(front))).status_code == 404


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
async def test_a_connection_that_sends_nothing_is_closed_without_holding_up_others(served):
    fake, front = served
    loop = asyncio.get_running_loop()
    before = sum(front.handed_off)
    idle = []
    for partial in (b"", b"", b"", b"GET /heal"):  # nothing at all, or a request line never finished
        s = socket.create_connection(("127.0.0.1", front.port))
        s.setblocking(False)
        if partial:
            s.sendall(partial)
        idle.append(s)
    opened = time.monotonic()

    async def closed_after(s: socket.socket) -> float:
        try:  # closed by the front: an end of file, or a reset where it left bytes unread
            assert await asyncio.wait_for(loop.sock_recv(s, 1), 30) == b""
        except ConnectionResetError:
            pass
        return time.monotonic() - opened

    closing = [asyncio.ensure_future(closed_after(s)) for s in idle]
    async with httpx.AsyncClient(base_url=front.base_url, timeout=60) as c:
        for _ in range(3):
            assert (await c.get("/v1/models")).status_code == 200
    served_in = time.monotonic() - opened
    closed = await asyncio.gather(*closing)
    for s in idle:
        s.close()
    assert served_in < min(closed), (served_in, closed)  # others were served while those waited
    assert all(2.5 < t < 20 for t in closed), closed  # closed once the front's peek_timeout_s (3 s) ran out
    assert sum(front.handed_off) - before == 1  # the httpx client's one connection; the idle ones never left the front


@pytest.mark.slow
async def test_a_killed_worker_loses_only_its_sessions(smollm2_tokenizer, caplog):
    fake = FakeEngineForTests(smollm2_tokenizer, model="smollm2")
    fake.default = lambda prompt: Scripted(completion_ids=answer_ids(smollm2_tokenizer, prompt))
    on0, on1 = sid_on(0, "kill"), sid_on(1, "kill")
    body = {"messages": [{"role": "user", "content": "Still there?"}]}
    async with serve_app(fake.app) as engine_url:
        settings = GatewaySettings(engine=EngineSettings(base_url=engine_url, backoff_s=0.01), tokenizer="smollm2")
        async with GatewayWorkers(settings, WorkersSettings(workers=2)) as front, \
                httpx.AsyncClient(base_url=front.base_url, timeout=30, headers={"Connection": "close"}) as c, \
                httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=1)) as kept:
            # every request of `c` on a new connection, through the front; `kept` keeps one, in worker 0
            bases = {sid: (await c.post("/sessions", json={"session_id": sid}, headers=admin(front))).json()["base_url"]
                     for sid in (on0, on1)}
            for sid in (on0, on1):
                assert (await c.post(f"{bases[sid]}/chat/completions", json=body)).status_code == 200
            assert (await kept.get(bases[on0] + "/models")).status_code == 200
            victim = front.pids[1]
            os.kill(victim, signal.SIGKILL)
            for _ in range(200):
                if front.lost:
                    break
                await asyncio.sleep(0.05)
            assert front.lost == {1: -signal.SIGKILL}
            assert f"gateway worker 1 (pid {victim}) was killed by SIGKILL" in caplog.text

            handed_to_victim = front.handed_off[1]
            health = (await c.get("/health")).json()
            assert health["status"] == "degraded"
            assert [w["status"] for w in health["workers"]] == ["ok", "lost"]
            for client in (c, kept):  # a new connection, handed to worker 0, and one already there: a clear 503
                lost = await client.post(f"{bases[on1]}/chat/completions", json=body)
                assert lost.status_code == 503, lost.text
                assert lost.json()["error"]["code"] == "gateway_worker_lost"
                assert f"gateway worker 1 (pid {victim})" in lost.json()["error"]["message"]
                assert "lost" in lost.json()["error"]["message"]
            again = await c.post("/sessions", json={"session_id": on1}, headers=admin(front))
            assert again.status_code == 503 and again.json()["error"]["code"] == "gateway_worker_lost"

            assert (await c.post(f"{bases[on0]}/chat/completions", json=body)).status_code == 200  # the others serve
            assert (await kept.post(f"{bases[on0]}/chat/completions", json=body)).status_code == 200
            fresh = [(await c.post("/sessions", headers=admin(front))).json()["session_id"] for _ in range(4)]
            assert [owner(sid, 2) for sid in fresh] == [0] * 4  # new sessions only where they can live
            listed = (await c.get("/sessions", headers=admin(front))).json()
            assert {row["worker"] for row in listed} == {0} and on0 in {row["session_id"] for row in listed}
            paused = (await c.post("/weights/pause", headers=admin(front))).json()
            assert paused["paused"] and "lost" in paused["workers"][1]
            assert (await c.post("/weights/resume", headers=admin(front))).status_code == 200
            assert front.handed_off[1] == handed_to_victim  # the front handed the lost worker nothing more


def test_every_route_is_pinned_where_its_state_lives():
    """Each route of the gateway's table: a session's routes go to the session's owner, the routes outside a
    session that serve the default session to its owner, the rest anywhere. A new route lands in the right
    place or fails here."""
    gw = PolicyGateway(GatewaySettings(engine=EngineSettings(base_url="http://127.0.0.1:9/v1")))
    for route in gw.routes.table():
        path = route.path.replace("{sid}", "s-1").replace("{token}", "tok").replace("{target}", "m:generateContent")
        if "{sid}" in route.path:
            assert session_of(path) == "s-1", route.path
        elif route.path in ("/health", "/v1/models", "/sessions") or route.path.startswith("/weights"):
            assert session_of(path) is None, route.path
        else:  # a dialect in the admin's default session
            assert session_of(path) == DEFAULT_SESSION, route.path
    assert request_path(b"POST /sessions/s-1/tok/v1/chat/completions?x=1 HTTP/1.1\r") == "/sessions/s-1/tok/v1/chat/completions"
    assert request_path(b"GET http://127.0.0.1:8100/sessions/s-1/tok/trajectory HTTP/1.1") == "/sessions/s-1/tok/trajectory"
    assert request_path(b"\x16\x03\x01 garbage") is None
    assert owner("s-1", 2) == owner("s-1", 2) and {owner(f"s-{i}", 3) for i in range(50)} == {0, 1, 2}


def _gone(pid: int) -> bool:
    """Whether the process has exited (a zombie not yet reaped by its new parent counts)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


@pytest.mark.slow
@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
async def test_stopping_the_command_leaves_no_worker_processes(smollm2_tokenizer, stop_signal):
    """SIGTERM stops the workers in order; even a front killed outright leaves none behind (each sees its
    channel close and stops)."""
    fake = FakeEngineForTests(smollm2_tokenizer, model="smollm2")
    fake.default = lambda prompt: Scripted(completion_ids=answer_ids(smollm2_tokenizer, prompt))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with serve_app(fake.app) as engine_url:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tackroom_gateway", "--engine", engine_url, "--port", str(port), "--workers", "2",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "COLUMNS": "200", "PYTHONFAULTHANDLER": "1"})
        pids: list[int] = []
        try:
            banner = (await asyncio.wait_for(proc.stdout.readuntil(b"stops it"), 180)).decode()
            pids = [int(p) for p in re.search(r"workers:\s+2 processes \(pids (\d+), (\d+)\)", banner).groups()]
            token = re.search(r"admin token:\s+(\S+)", banner).group(1)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
                made = await c.post("/sessions", headers={"Authorization": f"Bearer {token}"})
                r = await c.post(made.json()["base_url"] + "/chat/completions",
                                 json={"messages": [{"role": "user", "content": "hi"}]})
                assert r.status_code == 200, r.text
            assert not any(_gone(p) for p in pids)
            proc.send_signal(stop_signal)
            await asyncio.wait_for(proc.wait(), 60)
            for _ in range(300):
                if all(_gone(p) for p in pids):
                    break
                await asyncio.sleep(0.1)
            assert all(_gone(p) for p in pids), [p for p in pids if not _gone(p)]
            if stop_signal == signal.SIGTERM:  # (the workers share the front's output: read once they are gone)
                out, err = await asyncio.wait_for(proc.communicate(), 30)
                assert proc.returncode == 0, err.decode()
                assert "gateway stopped" in out.decode() and "Traceback" not in err.decode()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            for p in pids:
                if not _gone(p):
                    os.kill(p, signal.SIGKILL)
