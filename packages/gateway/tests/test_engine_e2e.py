"""End to end through the gateway against the real local vLLM serving SmolLM2-135M-Instruct.

``TACKROOM_ENGINE_URL`` names the engine (``tackroom model up`` prints it); the
engine-killing test starts a private engine from the same venv and model
(``TACKROOM_ENGINE_PYTHON``/``TACKROOM_ENGINE_MODEL``, default: tackroom's cache).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

import tackroom
from tackroom import InfraError, ModelError
from tackroom.testing import skip_or_fail
from tackroom_gateway import ChatTemplate, build_gateway
from tackroom_gateway import tokenizers as tk

pytestmark = [pytest.mark.engine, pytest.mark.slow]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    }
]


def check_invariants(traj) -> None:
    for k in range(1, len(traj.turns)):
        prev, cur = traj.turns[k - 1], traj.turns[k]
        if cur.branch == prev.branch:
            assert cur.prompt_ids[: len(prev.prompt_ids) + len(prev.completion_ids)] == prev.prompt_ids + prev.completion_ids
    last = traj.turns[-1]
    assert traj.token_ids == last.prompt_ids + last.completion_ids
    assert len(traj.loss_mask) == len(traj.token_ids) == len(traj.logprobs)
    assert sum(traj.loss_mask) == sum(len(t.completion_ids) for t in traj.turns if t.branch == last.branch)
    assert all(lp <= 0.0 for lp in traj.logprobs) and any(lp < 0.0 for lp in traj.logprobs)


async def test_three_turn_tool_conversation(engine_url, smollm2_tokenizer):
    async with build_gateway(engine_url, tokenizer="smollm2") as gw:
        async with httpx.AsyncClient(base_url=gw.session_base_url("trial-1"), timeout=120) as c:
            messages = [{"role": "user", "content": "What is the weather in Paris right now?"}]
            r1 = await c.post("/chat/completions", json={"messages": messages, "tools": TOOLS, "max_tokens": 64, "temperature": 0,
                                                         "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})
            assert r1.status_code == 200, r1.text
            m1 = r1.json()["choices"][0]["message"]
            assert r1.json()["choices"][0]["finish_reason"] == "tool_calls"
            call = m1["tool_calls"][0]
            assert call["function"]["name"] == "get_weather" and "city" in json.loads(call["function"]["arguments"])
            messages += [m1, {"role": "tool", "tool_call_id": call["id"], "content": "Sunny, 22 °C, light wind"}]
            r2 = await c.post("/chat/completions", json={"messages": messages, "tools": TOOLS, "max_tokens": 48, "temperature": 0})
            assert r2.status_code == 200, r2.text
            messages += [r2.json()["choices"][0]["message"], {"role": "user", "content": "Should I take an umbrella?"}]
            r3 = await c.post("/chat/completions", json={"messages": messages, "tools": TOOLS, "max_tokens": 48, "temperature": 0})
            assert r3.status_code == 200, r3.text
            messages.append(r3.json()["choices"][0]["message"])
        traj = gw.trajectory("trial-1")
    assert [t.branch for t in traj.turns] == [0, 0, 0] and traj.notes == []
    check_invariants(traj)
    assert traj.metrics["tool_calls"] >= 1
    # naive re-render of the same transcript is not what the engine saw and produced
    tmpl = ChatTemplate(smollm2_tokenizer)
    naive = tmpl.encode(tmpl.render(messages, tools=TOOLS, add_generation_prompt=False))
    engine_text = tmpl.decode(traj.token_ids)
    print(f"\nnaive ids == engine ids: {naive == traj.token_ids}; engine's call: {engine_text.split('<tool_call>')[-1].split('</tool_call>')[0]!r}")
    assert naive != traj.token_ids


async def test_streaming_matches_non_streaming(engine_url):
    body = {"messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 40, "temperature": 0}
    async with build_gateway(engine_url, tokenizer="smollm2") as gw:
        async with httpx.AsyncClient(timeout=120) as c:
            plain = (await c.post(gw.session_base_url("p") + "/chat/completions", json=body)).json()
            content, finish, chunks = "", None, 0
            async with c.stream("POST", gw.session_base_url("s") + "/chat/completions", json={**body, "stream": True}) as r:
                assert r.status_code == 200
                async for line in r.aiter_lines():
                    if line.startswith("data: {"):
                        ev = json.loads(line[6:])
                        chunks += 1
                        for ch in ev["choices"]:
                            content += ch["delta"].get("content") or ""
                            finish = ch["finish_reason"] or finish
        ps, ss = gw.trajectory("p"), gw.trajectory("s")
    assert chunks > 3
    assert content == plain["choices"][0]["message"]["content"] and finish == plain["choices"][0]["finish_reason"]
    assert ss.turns[0].completion_ids == ps.turns[0].completion_ids
    check_invariants(ss)


async def test_eight_concurrent_sessions(engine_url):
    cities = ["Paris", "Rome", "Oslo", "Lima", "Cairo", "Tokyo", "Quito", "Perth"]
    async with build_gateway(engine_url, tokenizer="smollm2") as gw:

        async def session(i: int, city: str) -> float:
            start = time.monotonic()
            async with httpx.AsyncClient(base_url=gw.session_base_url(f"s{i}"), timeout=180) as c:
                msgs = [{"role": "user", "content": f"Tell me one fact about {city}."}]
                for follow_up in ("And another one?", None):
                    r = await c.post("/chat/completions", json={"messages": msgs, "max_tokens": 32, "temperature": 0.8, "seed": i})
                    assert r.status_code == 200, r.text
                    msgs.append(r.json()["choices"][0]["message"])
                    if follow_up:
                        msgs.append({"role": "user", "content": follow_up})
            return time.monotonic() - start

        durations = await asyncio.gather(*(session(i, c) for i, c in enumerate(cities)))
        trajs = [gw.trajectory(f"s{i}") for i in range(8)]
        tmpl = gw.template
    for i, traj in enumerate(trajs):
        assert [t.branch for t in traj.turns] == [0, 0]
        check_invariants(traj)
        prompt_text = tmpl.decode(traj.turns[1].prompt_ids)
        assert cities[i] in prompt_text and all(c not in prompt_text for c in cities if c != cities[i] and c not in cities[i])
    print(f"\n8 sessions x 2 turns: slowest session {max(durations):.1f}s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def private_engine(engine_url, tmp_path):
    """A second real vLLM from the same venv and model, ours to kill; yields (url, process)."""
    python = Path(os.environ.get("TACKROOM_ENGINE_PYTHON") or tk.cache_root() / "engine-venv" / "bin" / "python")
    model = Path(os.environ.get("TACKROOM_ENGINE_MODEL") or tk.cache_root() / "models" / "SmolLM2-135M-Instruct")
    if not python.is_file() or not model.is_dir():
        skip_or_fail(f"no engine venv/model to start a private engine from (looked for {python} and {model})")
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "auto", "VLLM_USE_AOT_COMPILE": "0"}
    log = (tmp_path / "engine.log").open("wb")
    proc = None
    try:
        # The free port is only free when asked: under xdist another test may take it before vLLM binds, so a start
        # that dies of "Address already in use" is retried on a fresh port (CI hit this once).
        for _attempt in range(3):
            port = _free_port()
            proc = subprocess.Popen(
                [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", "127.0.0.1",
                 "--port", str(port), "--max-model-len", "4096", "--served-model-name", "smollm2"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True,
            )
            url = f"http://127.0.0.1:{port}/v1"
            deadline, up = time.monotonic() + 420, False
            while not up and proc.poll() is None and time.monotonic() < deadline:
                try:
                    up = httpx.get(url + "/models", timeout=2).status_code == 200
                except httpx.HTTPError:
                    time.sleep(2)
            if up:
                break
            if proc.poll() is None or "Address already in use" not in (tmp_path / "engine.log").read_text():
                pytest.fail(f"private engine did not come up: {(tmp_path / 'engine.log').read_text()[-3000:]}")
        else:
            pytest.fail(f"private engine found no free port in 3 tries: {(tmp_path / 'engine.log').read_text()[-3000:]}")
        yield url, proc
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        if proc is not None:
            proc.wait(timeout=60)
        log.close()


async def test_engine_killed_mid_request(private_engine):
    url, proc = private_engine
    long = {"messages": [{"role": "user", "content": "Write a long story about a horse."}], "max_tokens": 3000,
            "ignore_eos": True, "temperature": 0.8}
    async with build_gateway(url, tokenizer="smollm2", backoff_s=0.2) as gw:
        async with httpx.AsyncClient(timeout=120) as c:

            async def plain() -> httpx.Response:
                return await c.post(gw.session_base_url("plain") + "/chat/completions", json=long)

            async def streamed() -> list[dict]:
                events = []
                async with c.stream("POST", gw.session_base_url("stream") + "/chat/completions", json={**long, "stream": True}) as r:
                    assert r.status_code == 200
                    async for line in r.aiter_lines():
                        if line.startswith("data: {"):
                            events.append(json.loads(line[6:]))
                            if len(events) == 20:
                                os.killpg(proc.pid, signal.SIGKILL)  # the engine dies mid-request
                return events

            plain_task = asyncio.create_task(plain())
            start = time.monotonic()
            events = await asyncio.wait_for(streamed(), timeout=120)
            plain_resp = await asyncio.wait_for(plain_task, timeout=60)
            elapsed = time.monotonic() - start
            after = await c.post(gw.session_base_url("after") + "/chat/completions", json={"messages": long["messages"]})
    assert any(e.get("error", {}).get("code") == "engine_unavailable" for e in events)
    assert plain_resp.status_code == 503 and plain_resp.json()["error"]["code"] == "engine_unavailable"
    assert after.status_code == 503
    for sid in ("plain", "stream", "after"):
        err = gw.session_error(sid)
        assert isinstance(err, InfraError) and err.error_class == "infra", sid
    print(f"\nengine killed: both requests failed over in {elapsed:.1f}s")


class LongAnswerHarness(tackroom.Harness):
    """A policy that stalls: it asks for a very long answer (the model looping), in one call."""

    name = "long-answer"
    capabilities = frozenset({"chat", "needs_policy"})

    async def run(self, task, sandbox, policy):
        async with httpx.AsyncClient(timeout=600) as client:
            r = await client.post(f"{policy.base_url}/chat/completions", json={
                "model": policy.model, "messages": [{"role": "user", "content": task.instruction}],
                "max_tokens": 3000, "min_tokens": 2000})  # no stop before 2000
        raise ModelError(f"not expected to finish: HTTP {r.status_code}")


async def test_a_long_generation_past_the_agent_timeout_is_the_models_failure(engine_url, tmp_path):
    """Through the real runtime and the real vLLM: the agent's request is open when its turn ends, but the
    engine answers the gateway's 1-token probes while generating, so the trial is ``model`` (graded), not infra."""
    from test_engine_faults import run_one_trial

    async with build_gateway(engine_url, tokenizer="smollm2", probe_interval_s=0.3) as gw:
        result = await run_one_trial(tmp_path, gw, agent_timeout_s=3, harness=LongAnswerHarness)
        probes, last = gw.liveness.probes, gw.liveness.last_probe
    assert result.error is not None and result.error.error_class == "model", (result.error, result.timings)
    assert result.error.type == "AgentTimeoutError" and result.reward == 0.0
    assert probes >= 1 and last is not None and last.error is None, last
