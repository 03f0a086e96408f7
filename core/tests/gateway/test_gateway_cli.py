"""``tackroom gateway`` as a process: serves sessions in front of an engine, or says why it cannot."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys

import httpx
import pytest
from fake_engine import FakeEngineForTests, Scripted, serve_app


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
async def test_gateway_command_serves_until_signalled(smollm2_tokenizer, stop_signal):
    fake = FakeEngineForTests(smollm2_tokenizer, model="smollm2")
    fake.default = lambda prompt: Scripted(completion_ids=smollm2_tokenizer.encode("Hello!", add_special_tokens=False) + [2])
    port = _free_port()
    async with serve_app(fake.app) as engine_url:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tackroom.cli.main", "gateway", "--engine", engine_url, "--port", str(port),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, "COLUMNS": "200"},
        )
        try:
            banner = (await asyncio.wait_for(proc.stdout.readuntil(b"stops it"), 120)).decode()
            assert re.search(rf"session base URL: http://127\.0\.0\.1:{port}/sessions/<session_id>/v1", banner)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
                # it keeps serving: one request a second for several seconds, each answered
                for i in range(6):
                    r = await c.post(f"/sessions/cli-{i}/v1/chat/completions",
                                     json={"messages": [{"role": "user", "content": "hi"}]})
                    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "Hello!"
                    assert r.json()["model"] == "smollm2"
                    traj = (await c.get(f"/sessions/cli-{i}/trajectory")).json()
                    assert traj["loss_mask"].count(1) == len(smollm2_tokenizer.encode("Hello!", add_special_tokens=False)) + 1
                    assert proc.returncode is None
                    await asyncio.sleep(1.0)
            proc.send_signal(stop_signal)
            out, err = await asyncio.wait_for(proc.communicate(), 30)
            assert proc.returncode == 0, err.decode()
            assert "gateway stopped" in out.decode()
            assert "Traceback" not in err.decode()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_gateway_command_without_engine_says_so():
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tackroom.cli.main", "gateway", "--engine", "http://127.0.0.1:9/v1", "--port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, "COLUMNS": "200"},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 2
    assert "unavailable" in err.decode() and "127.0.0.1:9" in err.decode()
