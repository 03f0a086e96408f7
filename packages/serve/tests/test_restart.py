"""A restart loses no submitted rollout: a service killed mid-batch (SIGKILL) and started again resumes what was
running as new attempts (``--on-restart requeue``) or marks it ``interrupted``; queued rollouts run on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from serve_testing import TOKEN, run_config, served, wait_for

from tackroom.testing import write_task
from tackroom_serve import ServeClient

pytestmark = pytest.mark.slow


def start_service(folder: Path, tokens: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    """``python -m tackroom_serve`` in its own process; its URL, read from the line it prints."""
    process = subprocess.Popen([sys.executable, "-m", "tackroom_serve", "--folder", str(folder), "--tokens",
                                str(tokens), "--port", "0", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    line = process.stdout.readline()
    if not line.startswith("tackroom serve: http://"):
        process.kill()
        raise AssertionError(f"the service did not start: {line!r} {process.stderr.read()}")
    return process, line.split()[2].rstrip("/")


def states(folder: Path) -> dict[str, int]:
    engine = sa.create_engine(f"sqlite:///{folder / 'serve.db'}")
    with engine.connect() as conn:
        found = dict(conn.execute(sa.text("SELECT state, count(*) FROM rollouts GROUP BY state")).all())
    engine.dispose()
    return found


def test_a_killed_service_resumes_every_rollout_it_was_running_as_a_new_attempt(tmp_path):
    root = tmp_path / "tasks"
    for name in ("one", "two", "three"):
        write_task(root, name, instruction="Write done.", solve_sh="sleep 2\necho done > /app/out.txt\n",
                   test_sh='[ "$(cat /app/out.txt)" = done ] && echo 1 > /logs/verifier/reward.txt'
                           ' || echo 0 > /logs/verifier/reward.txt\n')
    tokens = tmp_path / "tokens"
    tokens.write_text(f"trainer {TOKEN}\n")
    folder = tmp_path / "svc"
    first, url = start_service(folder, tokens, "--concurrency", "2")
    try:
        with ServeClient(url, TOKEN) as client:
            batch = client.create_batch(run_config(root, harness={"name": "oracle"}, runtime={"concurrency": 2}),
                                        samples=2)
            deadline = time.monotonic() + 60
            while client.get_batch(batch.id).counts["running"] < 2:
                assert time.monotonic() < deadline, "two rollouts never ran at once"
                time.sleep(0.1)
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait(30)
    left = states(folder)
    assert left.get("running") == 2 and sum(left.values()) == 6, left

    second, url = start_service(folder, tokens, "--concurrency", "2")
    try:
        with ServeClient(url, TOKEN) as client:
            outcomes = list(client.results(batch.id, trajectory=False))
            rollouts = client.list_rollouts(batch.id)
            done = client.get_batch(batch.id)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(60)
    assert len(rollouts) == 6 and done.done and done.counts["completed"] == 6
    interrupted = {o.rollout_id for o in outcomes if o.state == "interrupted"}
    assert len(interrupted) == 2
    assert all(o.error_class == "infra" and o.error.type == "ServiceInterrupted"
               for o in outcomes if o.state == "interrupted")
    for r in rollouts:
        assert r.state == "completed" and r.outcome.reward == 1.0
        assert r.attempt == (2 if r.id in interrupted else 1)
    completed = [o.rollout_id for o in outcomes if o.state == "completed"]
    assert sorted(completed) == sorted(r.id for r in rollouts)  # each exactly once


async def test_with_on_restart_interrupt_what_ran_is_interrupted_and_can_be_retried(tmp_path, manager, tasks):
    config = run_config(tasks / "alpha", harness={"name": "sleepy", "seconds": 60}, runtime={"concurrency": 1})
    async with served(tmp_path / "svc", manager) as (_, client):
        batch = await client.create_batch(config, samples=2)
        await wait_for(lambda: _running(client, batch.id), what="a rollout to start")
        await client.pause(batch.id)  # the second one stays queued across the restart
    # the first process stopped with its rollout still running (a stop leaves it to the next start)
    assert states(tmp_path / "svc") == {"running": 1, "queued": 1}
    async with served(tmp_path / "svc", manager, on_restart="interrupt") as (service, client):
        assert len(service.recovered) == 1
        after = await client.get_batch(batch.id)
        assert after.counts["interrupted"] == 1 and after.counts["queued"] == 1 and after.state == "paused"
        outcome = (await client.get_rollout(service.recovered[0])).outcome
        assert outcome.state == "interrupted" and outcome.error_class == "infra"
        assert outcome.error.type == "ServiceInterrupted"
        retried = await client.retry_batch(batch.id)
        assert retried.retried == service.recovered and retried.batch.counts["queued"] == 2
        await client.cancel_batch(batch.id)


async def _running(client, batch_id: str) -> int:
    return (await client.get_batch(batch_id)).counts["running"]


async def test_a_configs_api_key_never_reaches_the_database_and_a_restart_says_so(tmp_path, manager, tasks):
    key = "sk-test-" + "k" * 32
    config = run_config(tasks, harness={"name": "nop"}, runtime={"concurrency": 1},
                        policy={"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key": key})
    async with served(tmp_path / "svc", manager) as (_, client):
        batch = await client.create_batch(config)
        await client.pause(batch.id)
        assert batch.config["policy"]["api_key"] != key
    assert key.encode() not in b"".join(p.read_bytes() for p in (tmp_path / "svc").rglob("*") if p.is_file())
    async with served(tmp_path / "svc", manager) as (_, client):
        await client.resume(batch.id)
        outcomes = [o async for o in client.results(batch.id, trajectory=False)]
    last = {o.rollout_id: o for o in outcomes}  # each rollout's latest outcome (one was interrupted first)
    assert len(last) == 3 and all(o.state in ("completed", "failed") for o in last.values())
    failed = [o for o in last.values() if o.state == "failed"]
    assert failed and all("never writes to disk" in o.error.message and o.error.phase == "batch_start"
                          for o in failed)
