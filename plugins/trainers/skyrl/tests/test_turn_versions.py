"""Which policy version sampled each turn, and why a step's mismatch is what it is.

- the run's engine proxy stamps each completion with the version pinned when the request arrived, and counts
  a request whose pin moved while the engine answered it (none: the pipeline pins per batch);
- the gateway's engine client and its recorded turns carry that version into ``TokenTurn.policy_version``;
- the generator's rollout metrics report the turns' versions (the run warns when they are not the batch's),
  turns and tool calls per episode;
- :func:`measure_breakdown` splits |trainer − sampled| into the engine against itself, the policy's drift and
  trainer against engine on the same version, from the engine's re-scoring (``prompt_logprobs``).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from tackroom import TokenTurn, Trajectory
from tackroom_gateway import InLoopServer
from tackroom_skyrl.generator import episode_metrics
from tackroom_skyrl.tinker.datums import Batch, Row, mismatch
from tackroom_skyrl.tinker.engine_sampling import EngineSampling
from tackroom_skyrl.tinker.mismatch_breakdown import measure_breakdown
from tackroom_skyrl.tinker.pipeline import EngineSamplingError


def _engine(seen: list[dict], gate: asyncio.Event | None = None) -> Starlette:
    async def completions(request):
        body = json.loads(await request.body())
        seen.append(body)
        if gate is not None:
            await gate.wait()
        if body.get("prompt_logprobs") is not None:  # scoring: -0.1 × position under adapter "...-v1", else -1
            scale = 0.1 if body["model"].endswith("-v1") else 1.0
            entries = [None] + [{str(t): {"logprob": -scale * i, "rank": 1}} for i, t in enumerate(body["prompt"][1:], 1)]
            return JSONResponse({"choices": [{"text": "x", "token_ids": [9], "prompt_logprobs": entries}]})
        return JSONResponse({"choices": [{"text": "x", "token_ids": [7, 8], "prompt_token_ids": body["prompt"]}],
                             "model": body["model"]})

    return Starlette(routes=[Route("/v1/completions", completions, methods=["POST"]),
                             Route("/health", lambda r: JSONResponse({}))])


def test_the_proxy_stamps_each_completion_with_the_version_it_was_sampled_with(tmp_path: Path) -> None:
    seen: list[dict] = []
    gate = asyncio.Event()

    async def scenario() -> None:
        server = InLoopServer(_engine(seen, gate), what="stand-in engine")
        port = await server.start()
        try:
            async with EngineSampling(tmp_path / "run", "policy", engine_url=f"http://127.0.0.1:{port}") as sampling:
                sampling.adapters.update({0: sampling.adapter_name(0), 1: sampling.adapter_name(1)})
                sampling.pin(0)
                async with httpx.AsyncClient(timeout=10) as client:
                    ask = client.post(f"{sampling.base_url}/completions", json={"model": "anything", "prompt": [1, 2]})
                    pending = asyncio.ensure_future(ask)
                    while not seen:
                        await asyncio.sleep(0.01)
                    sampling.pin(1)  # the pin moves while the engine answers: that request straddled it
                    gate.set()
                    first = (await pending).json()
                    second = (await client.post(f"{sampling.base_url}/completions",
                                                json={"model": "x", "prompt": [1]})).json()
                assert (first["policy_version"], second["policy_version"]) == (0, 1)
                assert [b["model"] for b in seen] == [sampling.adapter_name(0), sampling.adapter_name(1)]
                assert sampling.requests_by_version == {0: 1, 1: 1} and sampling.straddled == 1

                scored = await sampling.score(1, [5, 6, 7])
                assert scored == pytest.approx([0.0, -0.1, -0.2])
                assert seen[-1]["prompt_logprobs"] == 0 and seen[-1]["max_tokens"] == 1
                with pytest.raises(EngineSamplingError, match="version 4 is not loaded"):
                    await sampling.score(4, [1, 2])
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_the_gateway_carries_the_version_into_the_recorded_turn() -> None:
    from tackroom_gateway.engine_client import EngineClient, EngineSettings

    client = EngineClient(EngineSettings(base_url="http://127.0.0.1:1/v1", model="m"))
    data = {"choices": [{"text": "hi", "token_ids": [4, 5], "prompt_token_ids": [1, 2],
                         "logprobs": {"token_logprobs": [-0.5, -0.25], "tokens": ["h", "i"]}}], "policy_version": 3}
    completion = client._completion(data)
    assert completion.policy_version == 3
    data.pop("policy_version")
    assert client._completion(data).policy_version is None  # any other engine: not known

    from tackroom_gateway.tito import RecordedTurn

    turn = RecordedTurn.model_construct(index=0, messages=[], keys=[], reply={}, reply_key=(), context="",
                                        prompt_ids=[1, 2], completion_ids=[4, 5], logprobs=None, finish_reason="stop",
                                        branch=0, parent=None, tool_calls=0, tool_call_parse_failures=0,
                                        policy_version=3)
    assert turn.token_turn().policy_version == 3
    assert TokenTurn(prompt_ids=[1], completion_ids=[2]).policy_version is None


def test_episode_metrics_count_turns_tool_calls_and_the_turns_versions() -> None:
    def traj(versions: list[int | None], metrics: dict[str, float], messages: list[dict] | None = None) -> Trajectory:
        return Trajectory(messages=messages or [], metrics=metrics,
                          turns=[TokenTurn(prompt_ids=[1], completion_ids=[2], policy_version=v) for v in versions])

    archipelago = traj([2, 2, 2], {"tool_calls": 2.0, "tool_call_success_rate": 0.5})
    terminus = traj([2, 3], {"commands_sent": 1.0, "turns": 2.0})
    chat = traj([], {"turns": 1.0}, messages=[{"role": "assistant", "tool_calls": [{}, {}, {}]}])
    got = episode_metrics([archipelago, terminus, chat])
    assert got["tackroom/episode/turns"] == pytest.approx(2.0)  # 3, 2 and (no token turns) the harness's 1
    assert got["tackroom/episode/tool_calls"] == pytest.approx(2.0)  # 2, 1 and 3 from the transcript
    assert got["tackroom/episode/tool_call_success"] == 0.5
    assert (got["tackroom/turn_version_min"], got["tackroom/turn_version_max"]) == (2, 3)
    assert got["tackroom/turns_with_version"] == 5
    assert "tackroom/turn_version_min" not in episode_metrics([chat]) and episode_metrics([]) == {}


def test_a_turn_sampled_with_another_version_is_warned_about(tmp_path: Path) -> None:
    from skyrl.train.generators.base import TrajectoryID

    from tackroom_skyrl.tinker.pipeline import Sampled, Trained
    from tackroom_skyrl.tinker.records import StepRecord
    from tackroom_skyrl.tinker.rollouts import RolloutBatch
    from tackroom_skyrl.tinker.run_log import RunLog

    lines: list[str] = []
    batch = RolloutBatch([TrajectoryID(instance_id="a", repetition_id=0)], {"rewards": [1.0], "loss_masks": [[1]]})
    for low, high in ((4, 4), (3, 4)):
        RunLog(tmp_path, steps_total=1, max_staleness=1, mismatch_warn=0.1, log=lines.append).step(
            Trained(Sampled(1, 4, batch, 1.0), step=1, staleness=0),  # type: ignore[arg-type]
            StepRecord(step=1, batch=1, version=4, staleness=0, mean_reward=1.0, trained_trials=1, masked_trials=0,
                       rollout_metrics={"tackroom/turn_version_min": low, "tackroom/turn_version_max": high}))
    assert "WARNING" not in lines[0]
    assert "pinned to version 4 but its turns were sampled with versions 3..4" in lines[1]


def _row(prompt: list[int], response: list[int], mask: list[int], sampled: list[float]) -> Row:
    return Row(prompt, response, mask, sampled, advantage=1.0, group="g")


def test_the_breakdown_splits_the_mismatch_into_its_parts() -> None:
    # engine: under v0 every token scores -1.0; under v1 -1.5 (the policy moved 0.5 a token)
    async def score(version: int, ids: list[int]) -> list[float]:
        calls.append(version)
        return [0.0] + [-1.0 if version == 0 else -1.5] * (len(ids) - 1)

    calls: list[int] = []
    # row 0 sampled as the engine scores it (-1.0); row 1's last trained token was not (-3.0: another adapter)
    batch = Batch([_row([1, 2], [3, 4, 5], [1, 0, 1], [-1.0, 0.0, -1.0]),
                   _row([1, 2], [3, 4], [1, 1], [-1.0, -3.0]),
                   _row([1, 2], [3], [0], [0.0])], "token_mean")
    # the trainer (at v1) reads -1.52 everywhere: 0.02 from the engine at v1
    trainer = [[0.0] * 5 for _ in batch.rows]
    for row, lp in zip(batch.rows, trainer):
        for j in range(len(row.response_ids)):
            lp[row.start + j] = -1.52
    parts = asyncio.run(measure_breakdown(batch, trainer, score, sampled_version=0, trainer_version=1))
    assert parts is not None and parts.tokens == 4 and calls == [0, 1, 0, 1]  # the masked row is not scored
    assert parts.rescored_mean == pytest.approx(0.5) and parts.rescored_max == pytest.approx(2.0)
    assert parts.drift_mean == pytest.approx(0.5) and parts.same_version_mean == pytest.approx(0.02)
    assert parts.worst[0].row == 1 and parts.worst[0].position == 1 and parts.worst[0].sampled == -3.0
    total = mismatch(batch, trainer)["mismatch_mean"]
    assert total == pytest.approx((0.52 * 3 + 1.48) / 4)

    calls.clear()
    same = asyncio.run(measure_breakdown(batch, trainer, score, sampled_version=1, trainer_version=1))
    assert same is not None and same.drift_mean == 0.0 and calls == [1, 1]  # one version: scored once per row
    masked = Batch([_row([1], [2], [0], [0.0])], "token_mean")
    assert asyncio.run(measure_breakdown(masked, [[0.0]], score, sampled_version=0, trainer_version=0)) is None


def test_a_flagged_step_says_which_part_carries_its_mismatch(tmp_path: Path) -> None:
    from skyrl.train.generators.base import TrajectoryID

    from tackroom_skyrl.tinker.mismatch_breakdown import explain
    from tackroom_skyrl.tinker.pipeline import Sampled, Trained
    from tackroom_skyrl.tinker.records import StepRecord
    from tackroom_skyrl.tinker.rollouts import RolloutBatch
    from tackroom_skyrl.tinker.run_log import RunLog

    assert "drift across 1 update(s) (0.5400" in explain(0.56, 0.1, staleness=1, same_version=0.03, drift=0.54,
                                                         rescored=0.001)
    assert "does not reproduce its own samples" in explain(0.56, 0.1, staleness=1, same_version=0.03, drift=0.0,
                                                           rescored=0.5)
    assert "disagree on the same weights" in explain(0.3, 0.1, staleness=0, same_version=0.3, drift=0.0, rescored=0.0)

    lines: list[str] = []
    batch = RolloutBatch([TrajectoryID(instance_id="a", repetition_id=0)], {"rewards": [1.0], "loss_masks": [[1]]})
    RunLog(tmp_path, steps_total=1, max_staleness=1, mismatch_warn=0.1, log=lines.append).step(
        Trained(Sampled(1, 2, batch, 1.0), step=1, staleness=1, changed=True),  # type: ignore[arg-type]
        StepRecord(step=1, batch=1, version=2, staleness=1, mean_reward=1.0, trained_trials=1, masked_trials=0,
                   mismatch_mean=0.56, mismatch_max=6.6, mismatch_same_version=0.03, policy_drift=0.54,
                   mismatch_rescored=0.0))
    assert "= trainer vs engine on the same version 0.0300, policy drift 0.5400" in lines[0]
    assert "WARNING" in lines[0] and "the policy's drift across 1 update(s)" in lines[0]
