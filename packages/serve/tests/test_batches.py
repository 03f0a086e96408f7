"""A batch end to end: oracle and nop on the local sandbox over the example tasks, results streamed as they finish,
the trajectory carried whole, idempotent creation, the sync client, and the OpenAPI document."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from serve_testing import EXAMPLE_TASKS, OTHER_TOKEN, TOKEN, row_counts, run_config, served

from tackroom_serve import ServeClient, ServeError


async def test_oracle_and_nop_batches_stream_every_rollout_with_its_reward(tmp_path, manager):
    examples = [EXAMPLE_TASKS / "hello-file", EXAMPLE_TASKS / "echo-seven"]
    async with served(tmp_path / "svc", manager) as (service, client):
        oracle = await client.create_batch(run_config(examples, harness={"name": "oracle"}), samples=2,
                                           policy_version=1)
        nop = await client.create_batch(run_config(examples, harness={"name": "nop"}))
        assert (oracle.total, nop.total) == (4, 2) and oracle.counts["queued"] + oracle.counts["running"] == 4
        seen = [o async for o in client.results(oracle.id)]
        assert sorted((o.task_id, o.sample) for o in seen) == [("echo-seven", 0), ("echo-seven", 1),
                                                               ("hello-file", 0), ("hello-file", 1)]
        assert all(o.state == "completed" and o.reward == 1.0 and o.error_class is None for o in seen)
        assert all(o.policy_version == 1 and o.trajectory is not None and o.result["harness"] == "oracle"
                   for o in seen)
        assert [o.event_id for o in seen] == sorted(o.event_id for o in seen)
        nop_seen = [o async for o in client.results(nop.id)]
        assert [o.reward for o in nop_seen] == [0.0, 0.0] and all(o.state == "completed" for o in nop_seen)

        done = await client.get_batch(oracle.id)
        assert done.done and done.counts["completed"] == 4 and done.client == "trainer"
        rollouts = await client.list_rollouts(oracle.id)
        assert [r.position for r in rollouts] == [0, 1, 2, 3]
        assert [(r.task_id, r.sample) for r in rollouts] == [("hello-file", 0), ("hello-file", 1),
                                                             ("echo-seven", 0), ("echo-seven", 1)]
        assert len({r.trial_id for r in rollouts}) == 4 and all(r.outcome.trajectory is None for r in rollouts)
        one = await client.get_rollout(rollouts[0].id)
        assert one.outcome.reward == 1.0 and one.outcome.trajectory is not None
        assert (tmp_path / "svc" / "runs" / oracle.id / rollouts[0].trial_id / "result.json").is_file()
        listed = await client.list_batches()
        assert [b.id for b in listed] == [nop.id, oracle.id]
        resumed = [o async for o in client.results(oracle.id, after=seen[1].event_id)]
        assert [o.event_id for o in resumed] == [o.event_id for o in seen[2:]]


async def test_the_trajectory_keeps_token_ids_loss_mask_logprobs_and_each_turns_policy_version(tmp_path, manager,
                                                                                              tasks):
    async with served(tmp_path / "svc", manager) as (_, client):
        batch = await client.create_batch(run_config(tasks / "alpha", harness={"name": "sleepy", "seconds": 0}),
                                          policy_version=4)
        [outcome] = [o async for o in client.results(batch.id)]
    trajectory = outcome.trajectory
    assert trajectory.token_ids == [1, 2, 3, 4, 5] and trajectory.loss_mask == [0, 0, 0, 1, 1]
    assert trajectory.logprobs == [0.0, 0.0, 0.0, -0.5, -0.25]
    assert [t.policy_version for t in trajectory.turns] == [5] and outcome.policy_version == 4
    assert "slept" in trajectory.notes and "slept" in outcome.notes
    assert outcome.reward == 0.0 and outcome.error_class is None  # sleepy writes nothing: test.sh scores 0


async def test_a_repeated_idempotency_key_returns_the_same_batch_and_writes_nothing(tmp_path, manager, tasks):
    config = run_config(tasks, harness={"name": "nop"})
    async with served(tmp_path / "svc", manager) as (service, client):
        first = await client.create_batch(config, samples=2, idempotency_key="step-1")
        before = row_counts(service.engine)
        again = await client.create_batch(config, samples=2, idempotency_key="step-1")
        assert again.id == first.id and row_counts(service.engine) == before
        with pytest.raises(ServeError) as refused:
            await client.create_batch(config, samples=3, idempotency_key="step-1")
        assert refused.value.status == 409 and refused.value.code == "idempotency_key_reused"
        assert first.id in refused.value.message and row_counts(service.engine) == before
        racing = await asyncio.gather(*(client.create_batch(config, idempotency_key="step-2") for _ in range(4)))
        assert len({b.id for b in racing}) == 1
        assert row_counts(service.engine)["batches"] == before["batches"] + 1
        assert (await client.create_batch(config, idempotency_key="step-3")).id != first.id


async def test_each_client_has_its_own_idempotency_keys(tmp_path, manager, tasks):
    config = run_config(tasks / "alpha", harness={"name": "nop"})
    async with served(tmp_path / "svc", manager) as (service, client):
        mine = await client.create_batch(config, idempotency_key="k")
        url = client.base_url
        theirs = await asyncio.to_thread(_create_as_other, url, config)
        assert theirs.id != mine.id and theirs.client == "evaluator"


def _create_as_other(url: str, config: dict) -> object:
    with ServeClient(url, OTHER_TOKEN) as other:
        return other.create_batch(config, idempotency_key="k")


async def test_the_sync_client_does_what_the_async_one_does(tmp_path, manager, tasks):
    async with served(tmp_path / "svc", manager) as (_, client):
        url = client.base_url

        def use() -> tuple[list[str], int, list[str]]:
            with ServeClient(url, TOKEN) as sync:
                batch = sync.create_batch(run_config(tasks, harness={"name": "oracle"}), idempotency_key="s")
                states = [o.state for o in sync.results(batch.id, trajectory=False)]
                rows = sync.sql("SELECT count(*) FROM rollouts").rows
                return states, rows[0][0], [r.state for r in sync.list_rollouts(batch.id)]

        states, count, listed = await asyncio.to_thread(use)
    assert states == ["completed"] * 3 and count == 3 and listed == ["completed"] * 3


async def test_the_openapi_document_describes_every_route_and_model(tmp_path, manager):
    async with served(tmp_path / "svc", manager) as (service, client):
        url = client.base_url
        async with httpx.AsyncClient(base_url=url) as http:
            doc = (await http.get("/openapi.json")).json()
            health = (await http.get("/v1/health")).json()
    assert doc["openapi"].startswith("3.1") and health["database"] == "sqlite"
    paths = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert paths == {(op.method, op.path) for op in service.operations}
    create = doc["paths"]["/v1/batches"]["post"]
    assert create["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/BatchCreate")
    assert {"200", "201", "401", "409", "413", "422"} <= set(create["responses"])
    assert {"BatchCreate", "RunConfig", "BatchView", "Outcome", "ErrorBody"} <= set(doc["components"]["schemas"])
