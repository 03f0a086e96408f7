"""Which policy version sampled each turn, and why a step's mismatch is what it is.

- the run's engine proxy stamps each completion with the version pinned when the request arrived, and counts
  a request whose pin moved while the engine answered it (none: the pipeline pins per batch);
- the gateway's engine client and its recorded turns carry that version into ``TokenTurn.policy_version``;
- the generator's rollout metrics report the turns' versions (the run warns when they are not the batch's),
  turns and tool calls per episode;
- a step measured across s updates says its mismatch holds the policy's drift, beside what the run's
  staleness-0 steps measure on the same weights.
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
from tackroom_train.generator import episode_metrics
from tackroom_train.tinker.engine_sampling import EngineSampling


def _engine(seen: list[dict], gate: asyncio.Event | None = None) -> Starlette:
    async def completions(request):
        body = json.loads(await request.body())
        seen.append(body)
        if gate is not None:
            await gate.wait()
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

    from tackroom_train.tinker.pipeline import Sampled, Trained
    from tackroom_train.tinker.records import StepRecord
    from tackroom_train.tinker.rollouts import RolloutBatch
    from tackroom_train.tinker.run_log import RunLog

    lines: list[str] = []
    batch = RolloutBatch([TrajectoryID(instance_id="a", repetition_id=0)], {"rewards": [1.0], "loss_masks": [[1]]})
    for low, high in ((4, 4), (3, 4)):
        RunLog(tmp_path, steps_total=1, max_staleness=1, mismatch_warn=0.1, log=lines.append).step(
            Trained(Sampled(1, 4, batch, 1.0), step=1, staleness=0),  # type: ignore[arg-type]
            StepRecord(step=1, batch=1, version=4, staleness=0, mean_reward=1.0, trained_trials=1, masked_trials=0,
                       rollout_metrics={"tackroom/turn_version_min": low, "tackroom/turn_version_max": high}))
    assert "WARNING" not in lines[0]
    assert "pinned to version 4 but its turns were sampled with versions 3..4" in lines[1]


def test_a_step_across_updates_says_its_mismatch_holds_the_drift(tmp_path: Path) -> None:
    from skyrl.train.generators.base import TrajectoryID

    from tackroom_train.tinker.pipeline import Sampled, Trained
    from tackroom_train.tinker.records import StepRecord
    from tackroom_train.tinker.rollouts import RolloutBatch
    from tackroom_train.tinker.run_log import RunLog

    lines: list[str] = []
    log = RunLog(tmp_path, steps_total=3, max_staleness=1, mismatch_warn=0.1, log=lines.append)
    batch = RolloutBatch([TrajectoryID(instance_id="a", repetition_id=0)], {"rewards": [1.0], "loss_masks": [[1]]})
    for step, staleness, value in ((1, 1, 0.56), (2, 0, 0.03), (3, 1, 0.4)):
        log.step(Trained(Sampled(step, 2, batch, 1.0), step=step, staleness=staleness, changed=True),  # type: ignore[arg-type]
                 StepRecord(step=step, batch=step, version=2, staleness=staleness, mean_reward=1.0, trained_trials=1,
                            masked_trials=0, mismatch_mean=value, mismatch_max=6.6))
    assert "measured across 1 update(s): it holds how far the policy moved" in lines[0]
    assert "no staleness-0 step has measured" in lines[0]
    assert "WARNING" not in lines[1]
    assert "this run's staleness-0 steps (the same weights on both sides) measure 0.0300 (mean of 1)" in lines[2]
    assert [r.mismatch_same_version for r in log.records] == [None, 0.03, 0.03]
    assert log.warnings == 2 and [r.mismatch_flagged for r in log.records] == [True, False, True]
    assert STALE_ZERO_WARNING in lines_of_stale_zero(tmp_path)


STALE_ZERO_WARNING = "the trainer and the inference engine disagree"


def lines_of_stale_zero(tmp_path: Path) -> str:
    """A staleness-0 step above the threshold keeps the plain warning: there the two sides run the same weights."""
    from skyrl.train.generators.base import TrajectoryID

    from tackroom_train.tinker.pipeline import Sampled, Trained
    from tackroom_train.tinker.records import StepRecord
    from tackroom_train.tinker.rollouts import RolloutBatch
    from tackroom_train.tinker.run_log import RunLog

    lines: list[str] = []
    (tmp_path / "zero").mkdir()
    batch = RolloutBatch([TrajectoryID(instance_id="a", repetition_id=0)], {"rewards": [1.0], "loss_masks": [[1]]})
    RunLog(tmp_path / "zero", steps_total=1, max_staleness=1, mismatch_warn=0.1, log=lines.append).step(
        Trained(Sampled(1, 0, batch, 1.0), step=1, staleness=0),  # type: ignore[arg-type]
        StepRecord(step=1, batch=1, version=0, staleness=0, mean_reward=1.0, trained_trials=1, masked_trials=0,
                   mismatch_mean=0.3, mismatch_max=1.0))
    return lines[0]


def test_the_batchs_versions_are_read_per_token() -> None:
    """A turn continued across a weight update records each token's version: the batch's oldest version is its
    oldest token's, not the version its turns started under, and the rollout batch hands that to the pipeline."""
    from skyrl.train.generators.base import TrajectoryID

    from tackroom_train.tinker.rollouts import RolloutBatch

    continued = TokenTurn(prompt_ids=[1], completion_ids=[2, 3, 4], policy_version=3, token_versions=[3, 3, 4])
    later = TokenTurn(prompt_ids=[1, 2, 3, 4], completion_ids=[5], policy_version=4)
    got = episode_metrics([Trajectory(turns=[later]), Trajectory(turns=[later, continued])])
    assert (got["tackroom/turn_version_min"], got["tackroom/turn_version_max"]) == (3, 4)
    assert got["tackroom/turns_across_versions"] == 1 and got["tackroom/turns_with_version"] == 3
    only_late = episode_metrics([Trajectory(turns=[later, TokenTurn(prompt_ids=[1], completion_ids=[2, 3],
                                                                    policy_version=4, token_versions=[4, 5])])])
    assert only_late["tackroom/turn_version_min"] == 4 and only_late["tackroom/turn_version_max"] == 5

    batch = RolloutBatch([TrajectoryID(instance_id="a", repetition_id=0)],
                         {"rewards": [1.0], "loss_masks": [[1]], "rollout_metrics": got})  # type: ignore[arg-type]
    assert batch.oldest_version == 3
    assert RolloutBatch([], {"rewards": [], "loss_masks": [], "rollout_metrics": {}}).oldest_version is None  # type: ignore[arg-type]
