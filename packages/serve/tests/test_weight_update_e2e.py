"""A weight update in the middle of a batch, end to end (issue 50's "Done when"): a client submits a batch, pauses it
for a weight update, the weights change, it resumes on the new version, and every rollout comes back with token-exact
trajectories whose tokens name the version they were sampled under.

The real path: a ``tackroom serve`` in this event loop (serve_testing.served, the real async client over a socket),
the real policy gateway its batch runner starts through policy routing, a multi-turn chat harness that reaches the
model only through that gateway, and a stub engine on a real socket. The engine's "weights" are a version the test
changes between the pause and the resume (as a trainer would); what it samples depends on them: at completion
position ``j`` it emits ``answers[v][j]`` with logprob ``logprob(v, j)``, where ``v`` is its version at that moment
(version 1 says " one two three ...", version 2 " One Two Three ..."), continuing any prefix of an answer the prompt
already ends with. So a turn's ids and logprobs prove which weights sampled each token, and the versions the
trajectory records for them must agree, token for token. It is slow on purpose (a delay per call, per token when
streamed) so that the pause lands while trials are in flight; each test asserts it did.

* ``finish``: non-streamed calls; the calls on the engine complete on the old weights (the pause answers once none is
  on the engine), and the next calls of the running trials are held and sampled under version 2: a rollout's turns
  go 1, ..., 2, ...
* ``continue``: streamed calls; a call on the engine is cut, and after the resume continued from the ids it sampled
  (prompt ids + prefix ids, never re-tokenized, its ``max_tokens`` what is left) on the new weights: the turn's
  ``token_versions`` is ``[1] * k + [2] * rest``. (A non-streamed call cut by ``continue`` holds nothing until its
  answer is whole, so it is sampled again whole under the new version: tackroom-gateway's test_weight_updates.py.)
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from serve_testing import run_config, served, wait_for
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import tackroom
from tackroom_gateway import PROBE_USER, InLoopServer, load_tokenizer

pytestmark = pytest.mark.slow  # about 10 s a test (a tokenizer, a service, a gateway, a slow engine)

WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
TURNS = 3
MAX_TOKENS = 64


# -- the engine ------------------------------------------------------------------------------------
def logprob(version: int, position: int) -> float:
    """The stub engine's logprob of the token at ``position`` sampled under ``version`` (unique to both)."""
    return -(0.1 * version + 0.001 * position)


@dataclass
class EngineCall:
    """One completion request the engine got: its prompt ids and what it emitted (id, version) before it ended or its
    client went away."""

    prompt: list[int]
    stream: bool
    max_tokens: int | None
    emitted: list[tuple[int, int]] = field(default_factory=list)
    finished: bool = False
    at: float = field(default_factory=time.monotonic)


class VersionedEngine:
    """``/v1/models`` and vLLM's token-id ``/v1/completions`` (plain or streamed), sampling with ``version``'s
    "weights": see the module docstring. Liveness probes get one token at once and are not recorded."""

    def __init__(self, tokenizer: Any, *, call_delay_s: float = 0.0, token_delay_s: float = 0.0) -> None:
        self.tokenizer = tokenizer
        eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.answers: dict[int, list[int]] = {}
        for version, words in ((1, WORDS), (2, tuple(w.capitalize() for w in WORDS))):
            ids = [i for w in words for i in tokenizer.encode(" " + w, add_special_tokens=False)]
            assert len(ids) == len(words), f"each word one token, for the answers to line up: {words}"
            self.answers[version] = ids + [eot]
        self.version = 1
        self.call_delay_s = call_delay_s
        self.token_delay_s = token_delay_s
        self.calls: list[EngineCall] = []
        self.open = 0
        self.app = Starlette(routes=[Route("/v1/models", self._models, methods=["GET"]),
                                     Route("/v1/completions", self._completions, methods=["POST"])])
        self._server = InLoopServer(self.app, what="versioned stub engine", graceful_timeout_s=1)
        self.base_url = ""

    async def __aenter__(self) -> VersionedEngine:
        self.base_url = f"http://127.0.0.1:{await self._server.start()}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._server.stop()

    def expected(self, versions: list[int]) -> tuple[list[int], list[float]]:
        """The ids and logprobs of a completion whose token ``j`` was sampled under ``versions[j]``."""
        return [self.answers[v][j] for j, v in enumerate(versions)], [logprob(v, j) for j, v in enumerate(versions)]

    def _sampled_so_far(self, prompt: list[int]) -> int:
        """How much of an answer the prompt already ends with (a continuation's prefix), 0 for a fresh call."""
        for k in range(len(self.answers[1]) - 1, 0, -1):
            if len(prompt) > k and any(prompt[-k:] == answer[:k] for answer in self.answers.values()):
                return k
        return 0

    def _choice(self, position: int, token: int) -> dict[str, Any]:
        text = self.tokenizer.decode([token], skip_special_tokens=True)
        return {"index": 0, "text": text, "token_ids": [token], "finish_reason": None, "stop_reason": None,
                "logprobs": {"tokens": [text], "token_logprobs": [logprob(self.version, position)],
                             "top_logprobs": [{text: logprob(self.version, position)}], "text_offset": [0]}}

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "stub", "object": "model", "max_model_len": 4096}]})

    async def _completions(self, request: Request) -> Response:
        body = json.loads(await request.body())
        prompt = list(body["prompt"])
        if body.get("user") == PROBE_USER:
            return JSONResponse({"object": "text_completion", "choices": [
                {**self._choice(0, self.answers[self.version][0]), "finish_reason": "length",
                 "prompt_token_ids": prompt}]})
        call = EngineCall(prompt, bool(body.get("stream")), body.get("max_tokens"))
        self.calls.append(call)
        start = self._sampled_so_far(prompt)
        end = len(self.answers[1]) if call.max_tokens is None else min(len(self.answers[1]), start + call.max_tokens)

        def piece(position: int) -> dict[str, Any]:
            token = self.answers[self.version][position]  # the weights of the moment sample it
            call.emitted.append((token, self.version))
            choice = self._choice(position, token)
            if position == end - 1:
                choice["finish_reason"] = "stop" if end == len(self.answers[1]) else "length"
            return choice

        if not call.stream:
            self.open += 1
            try:
                await asyncio.sleep(self.call_delay_s)
                pieces = [piece(j) for j in range(start, end)]
            finally:
                self.open -= 1
            call.finished = True
            text = "".join(p["text"] for p in pieces)
            lps = [p["logprobs"] for p in pieces]
            return JSONResponse({"object": "text_completion", "model": "stub", "choices": [{
                "index": 0, "text": text, "token_ids": [p["token_ids"][0] for p in pieces],
                "prompt_token_ids": prompt, "finish_reason": pieces[-1]["finish_reason"], "stop_reason": None,
                "logprobs": {key: [x for lp in lps for x in lp[key]] for key in lps[0]}}]})

        async def events() -> AsyncIterator[bytes]:
            self.open += 1
            try:
                for j in range(start, end):
                    await asyncio.sleep(self.token_delay_s)
                    choice = piece(j)
                    if j == start:
                        choice["prompt_token_ids"] = prompt
                    yield b"data: " + json.dumps({"object": "text_completion", "choices": [choice]}).encode() + b"\n\n"
                yield b"data: [DONE]\n\n"
                call.finished = True
            finally:
                self.open -= 1

        return StreamingResponse(events(), media_type="text/event-stream")


# -- the harness -----------------------------------------------------------------------------------
class ChatterOptions(tackroom.PluginOptions):
    turns: int = TURNS
    stream: bool = False


class ChatterHarness(tackroom.Harness):
    """A chat-only agent (so serve routes it through the policy gateway): ``turns`` chat completions, each reply
    followed by "Go on."; streamed or not."""

    name = "chatter"
    Options = ChatterOptions
    capabilities = frozenset({tackroom.Capability.NEEDS_POLICY, tackroom.Capability.CHAT})

    async def run(self, task, sandbox, policy):
        # a nonce makes each trial's prompts its own, so the engine's log tells its calls apart
        messages: list[dict[str, Any]] = [{"role": "system", "content": f"Episode {uuid.uuid4().hex[:8]}."},
                                          {"role": "user", "content": task.instruction}]
        url = f"{policy.base_url.rstrip('/')}/chat/completions"
        async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {policy.api_key}"}) as client:
            for _ in range(self.options.turns):
                body = {"model": policy.model, "messages": messages, "max_tokens": MAX_TOKENS,
                        "stream": self.options.stream}
                ask = self._streamed if self.options.stream else self._whole
                reply = await ask(client, url, body)
                messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "Go on."}]
        return tackroom.Trajectory(messages=messages[:-1])

    @staticmethod
    async def _whole(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> str:
        response = await client.post(url, json=body)
        if response.status_code != 200:
            raise tackroom.InfraError(f"chat completion answered {response.status_code}: {response.text[:300]}")
        return response.json()["choices"][0]["message"]["content"]

    @staticmethod
    async def _streamed(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> str:
        text = ""
        async with client.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                raise tackroom.InfraError(f"chat completion answered {response.status_code}: "
                                          f"{(await response.aread())[:300]!r}")
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if event.get("error"):
                    raise tackroom.InfraError(f"the stream ended on an error: {event['error']}")
                text += "".join(c["delta"].get("content") or "" for c in event.get("choices") or [])
        return text


class WeightUpdatePlugins:
    @tackroom.hookimpl
    def tackroom_harnesses(self, register):
        register.add_harness(ChatterHarness)


# -- the tests -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("smollm2")


@pytest.fixture
def plugins(manager):
    manager.register(WeightUpdatePlugins(), name="test:weight-update-plugins")
    return manager


def batch_config(tasks, engine: VersionedEngine, *, stream: bool) -> dict[str, Any]:
    return run_config(tasks, harness={"name": "chatter", "stream": stream}, runtime={"concurrency": 2},
                      policy={"base_url": engine.base_url, "model": "stub", "tokenizer": "smollm2"})


def turn_versions(turn: tackroom.TokenTurn) -> list[int]:
    return turn.token_versions or [turn.policy_version] * len(turn.completion_ids)


def check_token_exact(outcomes: list[Any], engine: VersionedEngine, rollouts: list[Any]) -> list[list[list[int]]]:
    """Every rollout completed once; each trajectory is ``TURNS`` turns whose ids and logprobs are what the engine
    sampled under the version recorded for each token, on a prompt the engine was sent. Returns each rollout's
    per-token versions, turn by turn."""
    assert sorted(o.rollout_id for o in outcomes) == sorted(r.id for r in rollouts)  # none lost, none twice
    assert all(o.state == "completed" and o.error is None for o in outcomes), [(o.state, o.error) for o in outcomes]
    prompts = [c.prompt for c in engine.calls]
    versions = []
    for outcome in outcomes:
        traj = outcome.trajectory
        assert traj is not None and len(traj.turns) == TURNS, traj
        for turn in traj.turns:
            per_token = turn_versions(turn)
            assert set(per_token) <= {1, 2} and len(per_token) <= len(engine.answers[1]), turn
            ids, lps = engine.expected(per_token)
            # token-exact, and each token's recorded version the one whose weights sampled it
            assert turn.completion_ids == ids and turn.logprobs == pytest.approx(lps)
            assert turn.prompt_ids in prompts  # the prompt ids as the engine got them
        assert traj.token_ids == traj.turns[-1].prompt_ids + traj.turns[-1].completion_ids
        flat = [v for turn in traj.turns for v in turn_versions(turn)]
        assert flat == sorted(flat)  # nothing sampled under 2 comes before something under 1
        versions.append([turn_versions(t) for t in traj.turns])
    return versions


async def test_a_finish_pause_lets_calls_on_the_engine_end_on_the_old_weights_and_holds_the_next_ones(
        tmp_path, plugins, tasks, tokenizer):
    async with VersionedEngine(tokenizer, call_delay_s=0.4) as engine, \
            served(tmp_path / "svc", plugins) as (service, client):
        batch = await client.create_batch(batch_config(tasks, engine, stream=False), samples=2, policy_version=1)
        # pause once a rollout is done, while a later trial's first turn is on the engine (its next turns to come)
        await wait_for(lambda: _count(client, batch.id, "completed"), what="a rollout to complete")
        await wait_for(lambda: _first_turn_on_engine(engine), what="a first turn on the engine")
        paused = await client.pause(batch.id, model_calls="finish")
        gate = service.dispatcher.runners.open[batch.id].gateway.backend.weights
        assert paused.state == "paused" and gate.state().on_engine == 0 and engine.open == 0  # the update waits
        await wait_for(lambda: _held(gate), what="a running trial's next model call to be held")
        sent = len(engine.calls)
        before = await client.get_batch(batch.id)
        assert before.counts["running"] >= 1 and before.counts["completed"] < 6  # mid-batch
        await asyncio.sleep(0.5)
        assert len(engine.calls) == sent  # held at the gateway: nothing reaches the engine while paused
        engine.version = 2  # the trainer updates the weights
        resumed = await client.resume(batch.id, policy_version=2)
        assert resumed.state == "active" and resumed.policy_version == 2
        outcomes = [o async for o in client.results(batch.id)]
        rollouts = await client.list_rollouts(batch.id)

    per_rollout = check_token_exact(outcomes, engine, rollouts)
    assert all(len(set(v)) == 1 for turns in per_rollout for v in turns)  # finish: no turn spans versions
    turn_version = [[v[0] for v in turns] for turns in per_rollout]
    assert any(t == [1] * TURNS for t in turn_version), turn_version  # a rollout done before the update
    assert any(t == [2] * TURNS for t in turn_version), turn_version  # one started after it
    spanning = [t for t in turn_version if 1 in t and 2 in t]
    assert spanning, turn_version  # a rollout across the update: a held call sampled under 2
    for outcome, turns in zip(outcomes, turn_version):  # the batch's version when the attempt started
        assert outcome.policy_version in (1, 2)
        assert outcome.policy_version == 1 or turns == [2] * TURNS  # started after the resume: all on 2
        assert outcome.policy_version == 2 or turns[0] == 1 or turns == [2] * TURNS  # before: a held first call
        assert turns[0] == 2 or outcome.policy_version == 1


async def test_a_continue_pause_cuts_a_streamed_call_and_continues_it_from_its_sampled_ids_on_the_new_weights(
        tmp_path, plugins, tasks, tokenizer):
    async with VersionedEngine(tokenizer, token_delay_s=0.08) as engine, \
            served(tmp_path / "svc", plugins) as (service, client):
        batch = await client.create_batch(batch_config(tasks, engine, stream=True), samples=2, policy_version=1)
        await wait_for(lambda: _count(client, batch.id, "completed"), what="a rollout to complete")
        await wait_for(lambda: _mid_answer(engine), what="a streamed answer half sampled")
        paused = await client.pause(batch.id, model_calls="continue")
        gate = service.dispatcher.runners.open[batch.id].gateway.backend.weights
        assert paused.state == "paused" and gate.state().on_engine == 0  # cut, not waited for
        await wait_for(lambda: _held(gate), what="the cut call to wait for the resume")
        await wait_for(lambda: _engine_idle(engine), what="the engine to see the cut streams go")
        sent = len(engine.calls)
        before = await client.get_batch(batch.id)
        assert before.counts["running"] >= 1 and before.counts["completed"] < 6
        engine.version = 2
        await client.resume(batch.id, policy_version=2)
        outcomes = [o async for o in client.results(batch.id)]
        rollouts = await client.list_rollouts(batch.id)

    per_rollout = check_token_exact(outcomes, engine, rollouts)
    spanning = [(outcome, turn) for outcome in outcomes for turn in outcome.trajectory.turns
                if turn.token_versions is not None]
    assert spanning, "no turn was cut mid-answer and continued"
    for outcome, turn in spanning:
        k, n = turn.token_versions.count(1), len(turn.completion_ids)
        assert 0 < k < n and turn.token_versions == [1] * k + [2] * (n - k)
        assert turn.policy_version == 1 and turn.oldest_version == 1  # the version the turn started under
        assert outcome.policy_version == 1  # its attempt started before the pause
        # the prefix is what the cut call had sampled on the old weights (it may have sampled more, never sent)
        (cut,) = [c for c in engine.calls[:sent] if c.prompt == turn.prompt_ids and not c.finished]
        assert [token for token, _ in cut.emitted[:k]] == turn.completion_ids[:k]
        assert {version for _, version in cut.emitted} == {1}
        # token in: the continuation's prompt is the call's prompt ids + the ids it had sampled, as they were
        continuation = [c for c in engine.calls[sent:] if c.prompt == turn.prompt_ids + turn.completion_ids[:k]]
        assert len(continuation) == 1 and continuation[0].max_tokens == MAX_TOKENS - k
        assert any("continued" in note for note in outcome.trajectory.notes)
    first_turns = [[sorted(set(v)) for v in turns] for turns in per_rollout]
    assert [[1]] * TURNS in first_turns, first_turns  # a rollout done before the update
    assert [[2]] * TURNS in first_turns, first_turns  # one started after it


async def _first_turn_on_engine(engine: VersionedEngine) -> bool:
    eot = engine.answers[1][-1]
    ends = [c.prompt.count(eot) for c in engine.calls]  # a later turn's prompt holds more finished messages
    return any(not c.finished and n == min(ends) for c, n in zip(engine.calls, ends))


async def _count(client: Any, batch_id: str, state: str) -> int:
    return (await client.get_batch(batch_id)).counts[state]


async def _mid_answer(engine: VersionedEngine) -> bool:
    return any(not c.finished and 2 <= len(c.emitted) <= 4 for c in engine.calls)


async def _held(gate: Any) -> bool:
    return gate.state().waiting >= 1


async def _engine_idle(engine: VersionedEngine) -> bool:
    return engine.open == 0
