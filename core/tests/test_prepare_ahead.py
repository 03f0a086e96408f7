"""``[runtime] prepare_ahead``: trials are started and set up ahead of their turn and wait, prepared, for one of
``concurrency`` turns; never more than ``concurrency`` agents run at once, and the wait is off the attempt's clock."""

from __future__ import annotations

import asyncio
import time

import pytest
from pydantic import ValidationError

import tackroom
import tackroom.testing
from tackroom import ConfigError
from tackroom._attempt import Attempt
from tackroom._builtins.oracle_harness import OracleHarness
from tackroom._builtins.test_script_verifier import TestScriptVerifier
from tackroom._config import RuntimeConfig
from tackroom._executor import AsyncioExecutor, Executor
from tackroom._manager import PluginManager
from tackroom._runtime import TrialPlugins, TrialRuntime
from tackroom._trial import Trial
from tackroom_local import LocalSandboxProvider

EVENTS: list[tuple[str, str, float]] = []


class Timeline(OracleHarness):
    """The oracle, with a slow set-up (a world's servers starting) and a slow agent, each recorded."""

    name = "timeline"

    async def setup(self, sandbox, task):
        EVENTS.append(("setup", task.id, time.monotonic()))
        await asyncio.sleep(0.3)
        await super().setup(sandbox, task)
        EVENTS.append(("ready", task.id, time.monotonic()))

    async def run(self, task, sandbox, policy):
        EVENTS.append(("run", task.id, time.monotonic()))
        await asyncio.sleep(0.8)
        try:
            return await super().run(task, sandbox, policy)
        finally:
            EVENTS.append(("ran", task.id, time.monotonic()))


def tasks(tmp_path, n: int) -> list[tackroom.Task]:
    return [tackroom.load_task(tackroom.testing.write_task(
        tmp_path / "tasks", f"t{i}", instruction="write it", solve_sh="echo ok > /app/out.txt",
        test_sh='[ "$(cat /app/out.txt)" = ok ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n'))
        for i in range(n)]


def runtime(tmp_path, **kwargs) -> TrialRuntime:
    return TrialRuntime(tmp_path / "run", progress=False, manager=PluginManager(), attempts=1, **kwargs)


def items(ts: list[tackroom.Task]):
    plugins = TrialPlugins(Timeline, Timeline.Options(), LocalSandboxProvider(), TestScriptVerifier,
                           TestScriptVerifier.Options())
    return [(Trial(task_id=t.id, task_path=str(t.path), harness="timeline", sandbox="local", verifier="test-script"),
             t, plugins) for t in ts]


def runs_at_once(events) -> int:
    most = now = 0
    for kind, _, _ in sorted(events, key=lambda e: e[2]):
        now += {"run": 1, "ran": -1}.get(kind, 0)
        most = max(most, now)
    return most


def test_trials_are_set_up_while_others_run_but_run_one_at_a_time(tmp_path):
    EVENTS.clear()
    results = asyncio.run(runtime(tmp_path, concurrency=1, prepare_ahead=2).run_all(items(tasks(tmp_path, 4))))
    assert [r.reward for r in results] == [1.0] * 4, [r.error for r in results]
    assert runs_at_once(EVENTS) == 1  # concurrency still bounds the agents
    at = {(kind, task): t for kind, task, t in EVENTS}
    first_ran = min(t for kind, _, t in EVENTS if kind == "ran")
    ready_early = [task for kind, task, t in EVENTS if kind == "ready" and t < first_ran]
    assert len(ready_early) == 3, EVENTS  # the first trial and the two prepared ahead were ready before it finished
    waited = [r.timings.get("prepared_wait") for r in results]
    assert all(w is not None for w in waited) and max(waited) > 0.5, waited
    for task in {task for _, task, _ in EVENTS}:
        assert at[("setup", task)] < at[("ready", task)] <= at[("run", task)]


def test_without_prepare_ahead_a_trial_is_set_up_on_its_turn(tmp_path):
    EVENTS.clear()
    results = asyncio.run(runtime(tmp_path, concurrency=1).run_all(items(tasks(tmp_path, 2))))
    assert [r.reward for r in results] == [1.0, 1.0]
    (first_ran,) = [t for kind, task, t in EVENTS if kind == "ran" and task == results[0].task]
    (second_setup,) = [t for kind, task, t in EVENTS if kind == "setup" and task == results[1].task]
    assert second_setup > first_ran and all("prepared_wait" not in r.timings for r in results)


def test_the_wait_for_a_turn_moves_the_attempts_deadline(tmp_path):
    """A prepared trial that waits longer than its whole time limit still gets all of it once its turn comes."""
    (task,) = tasks(tmp_path, 1)
    rt = runtime(tmp_path, concurrency=1, prepare_ahead=1)
    trial, task, plugins = items([task])[0]

    async def main():
        turn = asyncio.Semaphore(1)
        await turn.acquire()  # another trial holds the only turn
        attempt = Attempt(rt.plan(trial, task, plugins, 1), rt.manager, turn)
        before = attempt.deadline
        asyncio.get_running_loop().call_later(0.4, turn.release)
        await attempt.take_turn()
        assert attempt.has_turn and turn.locked()
        return attempt.deadline - before, attempt.result.timings["prepared_wait"]

    moved, waited = asyncio.run(main())
    assert waited >= 0.4 and moved == pytest.approx(waited, abs=0.01)


class Elsewhere(Executor):
    """An executor that runs attempts where the runtime cannot hold them at their turn (as Ray's workers)."""

    name = "elsewhere"

    async def run(self, plan, *, manager, on_started):
        raise AssertionError("never reached")


def test_an_executor_that_cannot_hold_prepared_trials_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"'elsewhere' executor cannot hold prepared trials at their turn "
                                          r"\(prepare_ahead = 2\): set prepare_ahead = 0"):
        runtime(tmp_path, executor=Elsewhere(), prepare_ahead=2)
    assert runtime(tmp_path, executor=Elsewhere()).prepare_ahead == 0


class OwnRun(AsyncioExecutor):
    """In-process, but its own ``run`` does not pass a turn on."""

    name = "own-run"

    async def run(self, plan, *, manager, on_started):
        raise AssertionError("never reached")


def test_an_in_process_executor_whose_run_takes_no_turn_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="'own-run' executor cannot hold prepared trials"):
        runtime(tmp_path, executor=OwnRun(), prepare_ahead=1)


@pytest.mark.parametrize("value", [-1, "2", 1.5])
def test_prepare_ahead_is_a_whole_number_not_below_zero(value):
    with pytest.raises(ValidationError, match="prepare_ahead"):
        RuntimeConfig(prepare_ahead=value)
