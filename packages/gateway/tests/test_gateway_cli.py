"""``tackroom gateway`` as a process: serves sessions in front of an engine, or says why it cannot."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import sys
import time

import httpx
import pytest
from fake_engine import FakeEngineForTests, Scripted, serve_app

from tackroom_gateway.testing import EngineReply, MisbehavingEngine


async def _exit_after_signal(proc: asyncio.subprocess.Process, limit_s: float) -> tuple[bytes, bytes]:
    """The process's output once it exits. One still running after ``limit_s`` is aborted with SIGABRT (the
    interpreter runs with PYTHONFAULTHANDLER, so every thread's stack lands on stderr) and the test fails
    showing where it hung, not with a bare TimeoutError."""
    try:
        return await asyncio.wait_for(asyncio.shield(communicating := asyncio.ensure_future(proc.communicate())), limit_s)
    except TimeoutError:
        proc.send_signal(signal.SIGABRT)
        _, err = await asyncio.wait_for(communicating, 30)
        raise AssertionError(f"still running {limit_s:.0f}s after the signal; its threads:\n{err.decode()[-6000:]}") from None


def _gateway_env() -> dict[str, str]:
    return {**os.environ, "COLUMNS": "200", "PYTHONFAULTHANDLER": "1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Slow by cost: a `tackroom gateway` process that serves loads the tokenizer (transformers and, where installed,
# torch, a heavy import). The one that finds no engine stops before that and stays in the inner loop.
@pytest.mark.slow
@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
async def test_gateway_command_serves_until_signalled(smollm2_tokenizer, stop_signal):
    fake = FakeEngineForTests(smollm2_tokenizer, model="smollm2")
    fake.default = lambda prompt: Scripted(completion_ids=smollm2_tokenizer.encode("Hello!", add_special_tokens=False) + [2])
    port = _free_port()
    async with serve_app(fake.app) as engine_url:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tackroom_app", "gateway", "--engine", engine_url, "--port", str(port),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_gateway_env(),
        )
        try:
            banner = (await asyncio.wait_for(proc.stdout.readuntil(b"stops it"), 120)).decode()
            admin_token = re.search(r"admin token:\s+(\S+)", banner).group(1)
            assert re.search(rf"session base URL: http://127\.0\.0\.1:{port}/sessions/<session_id>/<session_token>/v1", banner)
            assert f"-H 'Authorization: Bearer {admin_token}' http://127.0.0.1:{port}/sessions" in banner
            admin = {"Authorization": f"Bearer {admin_token}"}
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
                assert (await c.post("/sessions")).status_code == 401  # sessions come from the gateway's owner only
                # it keeps serving: one request a second for several seconds, each answered
                for i in range(6):
                    made = await c.post("/sessions", json={"session_id": f"cli-{i}"}, headers=admin)
                    assert made.status_code == 201, made.text
                    session = made.json()
                    assert session["session_id"] == f"cli-{i}"
                    base_url = session["base_url"]
                    assert re.fullmatch(rf"http://127\.0\.0\.1:{port}/sessions/cli-{i}/[A-Za-z0-9_-]{{32}}/v1", base_url)
                    assert (await c.post(f"/sessions/cli-{i}/v1/chat/completions",
                                         json={"messages": [{"role": "user", "content": "hi"}]})).status_code == 404
                    r = await c.post(f"{base_url}/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
                    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "Hello!"
                    assert r.json()["model"] == "smollm2"
                    traj = (await c.get(session["trajectory_url"])).json()
                    assert traj["loss_mask"].count(1) == len(smollm2_tokenizer.encode("Hello!", add_special_tokens=False)) + 1
                    assert (await c.get(f"/sessions/cli-{i}/trajectory", headers=admin)).json()["token_ids"] == traj["token_ids"]
                    assert proc.returncode is None
                    await asyncio.sleep(1.0)
            proc.send_signal(stop_signal)
            out, err = await _exit_after_signal(proc, 60)
            assert proc.returncode == 0, err.decode()
            assert "gateway stopped" in out.decode()
            assert "Traceback" not in err.decode()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


@pytest.mark.slow
async def test_gateway_command_stops_cleanly_with_requests_cut_off_and_open():
    """Clients that hang up mid-request and a request still open at SIGTERM: no traceback in the log,
    the open request gets an OpenAI error, the process exits 0 without waiting on the stuck engine."""
    # the first reply would come, but late: 30 s, not 1 s, so a gateway that is slow to notice its client left (CI, a
    # loaded 2-core machine, saw more than the 0.5 s a 1 s reply left) still cuts the engine request before it
    async with MisbehavingEngine([EngineReply.ok("late", delay_s=30.0)], then=EngineReply.hang(), model="smollm2") as engine:
        port = _free_port()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tackroom_app", "gateway", "--engine", engine.base_url, "--port", str(port),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_gateway_env(),
        )
        try:
            banner = (await asyncio.wait_for(proc.stdout.readuntil(b"stops it"), 120)).decode()
            admin = {"Authorization": "Bearer " + re.search(r"admin token:\s+(\S+)", banner).group(1)}
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as c:
                url = (await c.post("/sessions", headers=admin)).json()["base_url"] + "/chat/completions"
                body = {"messages": [{"role": "user", "content": "hi"}]}
                for stream in (False, True):  # the client gives up while the gateway waits on the engine
                    async with httpx.AsyncClient(timeout=60) as quitter:
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(0.5):
                                async with quitter.stream("POST", url, json={**body, "stream": stream}) as r:
                                    await r.aread()
                for _ in range(400):  # the gateway let go of both engine requests (20 s at most)
                    if sum(q.client_went_away for q in engine.requests) == 2:
                        break
                    await asyncio.sleep(0.05)
                assert [q.client_went_away for q in engine.requests] == [True, True]
                pending = asyncio.create_task(c.post(url, json=body))
                while len(engine.requests) < 3:
                    await asyncio.sleep(0.02)
                start = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                out, err = await _exit_after_signal(proc, 30)
                took = time.monotonic() - start
                cut_off = await pending
            assert proc.returncode == 0, err.decode()
            assert "gateway stopped" in out.decode()
            for bad in ("Traceback", "CancelledError", "Exception in ASGI application", "ERROR"):
                assert bad not in err.decode(), err.decode()
            assert took < 15, f"stopping took {took:.1f}s: it waited for the stuck engine"
            assert cut_off.status_code == 503, cut_off.text
            assert cut_off.json()["error"]["code"] == "engine_request_interrupted"
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_gateway_command_without_engine_says_so():
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tackroom_app", "gateway", "--engine", "http://127.0.0.1:9/v1", "--port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, "COLUMNS": "200"},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 2
    assert "unavailable" in err.decode() and "127.0.0.1:9" in err.decode()
