"""Steering a batch while it runs: pause (nothing more starts, running trials finish) and resume with a new policy
version, cancel a rollout or a batch, retry what failed for infra reasons."""

from __future__ import annotations

import asyncio

import pytest
from serve_testing import run_config, served, wait_for

from tackroom_serve import ServeError


async def test_pause_drains_and_resume_records_the_new_policy_version_on_what_starts_after(tmp_path, manager, tasks):
    config = run_config(tasks, harness={"name": "sleepy", "seconds": 0.6}, runtime={"concurrency": 1})
    async with served(tmp_path / "svc", manager) as (_, client):
        batch = await client.create_batch(config, samples=2, policy_version=1)
        await wait_for(lambda: _count(client, batch.id, "running"), what="a rollout to start")
        paused = await client.pause(batch.id)
        assert paused.state == "paused"
        drained = await wait_for(lambda: _drained(client, batch.id), what="the running rollout to finish")
        assert drained.counts["completed"] >= 1 and drained.counts["queued"] >= 1 and not drained.done
        await asyncio.sleep(1.5)  # two dispatcher rounds: a paused batch starts nothing
        still = await client.get_batch(batch.id)
        assert still.counts == drained.counts
        resumed = await client.resume(batch.id, policy_version=2)
        assert resumed.state == "active" and resumed.policy_version == 2
        outcomes = [o async for o in client.results(batch.id, trajectory=False)]
    before = {o.rollout_id for o in outcomes if o.policy_version == 1}
    after = {o.rollout_id for o in outcomes if o.policy_version == 2}
    assert len(before) == drained.counts["completed"] and len(after) == drained.counts["queued"]
    assert len(before | after) == 6 and all(o.state == "completed" for o in outcomes)


async def _count(client, batch_id: str, state: str) -> int:
    return (await client.get_batch(batch_id)).counts[state]


async def _drained(client, batch_id: str):
    batch = await client.get_batch(batch_id)
    return batch if batch.counts["running"] == 0 else None


async def test_cancel_a_queued_rollout_a_running_one_and_then_the_batch(tmp_path, manager, tasks):
    config = run_config(tasks, harness={"name": "sleepy", "seconds": 60}, runtime={"concurrency": 1})
    async with served(tmp_path / "svc", manager, cancel_wait_sec=20) as (service, client):
        batch = await client.create_batch(config, samples=2)
        await wait_for(lambda: _count(client, batch.id, "running"), what="a rollout to start")
        rollouts = await client.list_rollouts(batch.id)
        running = next(r for r in rollouts if r.state == "running")
        queued = next(r for r in rollouts if r.state == "queued")
        assert (await client.cancel_rollout(queued.id)).state == "cancelled"
        stopped = await client.cancel_rollout(running.id)
        assert stopped.state == "cancelled" and stopped.outcome.notes == ["cancelled by trainer"]
        assert stopped.outcome.reward is None and not service.dispatcher.running.get(running.id)
        await wait_for(lambda: _count(client, batch.id, "running"), what="the next rollout to start")
        cancelled = await client.cancel_batch(batch.id)
        assert cancelled.state == "cancelled" and cancelled.done
        assert cancelled.counts["cancelled"] == 6 and cancelled.counts["completed"] == 0
        assert not service.dispatcher.running
        with pytest.raises(ServeError) as refused:
            await client.resume(batch.id)
        assert refused.value.status == 409
        with pytest.raises(ServeError) as refused:
            await client.retry_rollout(queued.id)
        assert refused.value.status == 409 and "cancelled" in refused.value.message
        events = [o async for o in client.results(batch.id, trajectory=False)]
    assert sorted(o.rollout_id for o in events) == sorted(r.id for r in rollouts)


async def test_infra_failures_are_retried_as_new_attempts_one_rollout_or_all_of_a_batch(tmp_path, manager, tasks):
    down = tmp_path / "grader-down"
    down.touch()
    config = run_config(tasks, harness={"name": "oracle"}, verifier={"name": "flaky-grader",
                                                                      "fail_while": str(down)},
                        runtime={"attempts": 1})
    async with served(tmp_path / "svc", manager) as (service, client):
        batch = await client.create_batch(config)
        failed = [o async for o in client.results(batch.id, trajectory=False)]
        assert [(o.state, o.error_class, o.reward) for o in failed] == [("failed", "infra", None)] * 3
        assert failed[0].error.type == "InfraError" and "503" in failed[0].error.message
        with pytest.raises(ServeError) as refused:
            await client.retry_batch(batch.id, error_classes=("infrastructure",))
        assert refused.value.status == 422
        down.unlink()
        one = await client.retry_rollout(failed[0].rollout_id)
        assert one.attempt == 2 and one.state in ("queued", "running", "completed")
        await wait_for(lambda: _settled(client, batch.id), what="the retried rollout")
        retried = await client.retry_batch(batch.id)
        assert sorted(retried.retried) == sorted(o.rollout_id for o in failed[1:])
        rest = [o async for o in client.results(batch.id, after=failed[-1].event_id, trajectory=False)]
        done = await client.get_batch(batch.id)
        again = await client.retry_batch(batch.id)
    assert sorted(o.rollout_id for o in rest) == sorted(o.rollout_id for o in failed)
    assert all(o.state == "completed" and o.reward == 1.0 and o.attempt == 2 for o in rest)
    assert done.counts["completed"] == 3 and again.retried == []


async def _settled(client, batch_id: str) -> bool:
    return (await client.get_batch(batch_id)).done


class RecordingGateway:
    """Stands in for the batch's policy gateway (the sleepy harness makes no model call): records what the service
    asks of it. The gateway's own pause and resume are tested in tackroom-gateway's test_weight_updates.py."""

    def __init__(self) -> None:
        self.policy_version: int | None = None
        self.asked: list[tuple[str, object]] = []

    async def pause(self, mode: str = "finish") -> None:
        self.asked.append(("pause", mode))

    def resume(self, policy_version: int | None = None) -> None:
        self.asked.append(("resume", policy_version))


async def test_a_pause_for_a_weight_update_holds_the_model_calls_at_the_batchs_gateway(tmp_path, manager, tasks):
    config = run_config(tasks, harness={"name": "sleepy", "seconds": 0.6}, runtime={"concurrency": 1})
    async with served(tmp_path / "svc", manager) as (service, client):
        batch = await client.create_batch(config, samples=1, policy_version=1)
        await wait_for(lambda: _count(client, batch.id, "running"), what="a rollout to start")
        gateway = service.dispatcher.runners.open[batch.id].gateway = RecordingGateway()
        with pytest.raises(ServeError) as refused:
            await client.pause(batch.id, model_calls="hold")
        assert refused.value.status == 422 and "'drain', 'finish' or 'continue'" in refused.value.message
        assert (await client.pause(batch.id, model_calls="continue")).state == "paused"
        await client.resume(batch.id, policy_version=2)
        await client.pause(batch.id)  # drain: the model calls go on
        await client.resume(batch.id)
        assert gateway.asked == [("pause", "continue"), ("resume", 2), ("resume", None)]
        assert all(o.state == "completed" for o in [o async for o in client.results(batch.id, trajectory=False)])
