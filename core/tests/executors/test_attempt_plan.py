"""The data path: the runtime plans each attempt once; an executor runs the plan and never sees the runtime."""

import asyncio
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import tackroom
import tackroom.testing
from tackroom._builtins.oracle_harness import OracleHarness
from tackroom._builtins.test_script_verifier import TestScriptVerifier
from tackroom._manager import PluginManager
from tackroom._runtime import TrialPlugins, TrialRuntime
from tackroom.executors import AsyncioExecutor, AttemptPlan, Executor, run_attempt
from tackroom_local import LocalSandboxProvider

REWARD_SH = "#!/bin/bash\nmkdir -p /logs/verifier\n[ \"$(cat /app/out.txt)\" = {i} ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"


def write_task(root: Path, i: int) -> tackroom.Task:
    return tackroom.load_task(tackroom.testing.write_task(
        root, f"t{i}", instruction=f"Write {i} to /app/out.txt", solve_sh=f"echo {i} > /app/out.txt\n",
        test_sh=REWARD_SH.format(i=i), verifier_timeout_sec=60))


def trial_for(task: tackroom.Task) -> tackroom.Trial:
    return tackroom.Trial(task_id=task.id, task_path=str(task.path), harness="oracle", sandbox="local",
                          verifier="test-script")


def oracle_plugins(root: Path) -> TrialPlugins:
    return TrialPlugins(OracleHarness, OracleHarness.Options(), LocalSandboxProvider({"root_dir": str(root)}),
                        TestScriptVerifier, TestScriptVerifier.Options())


def test_the_executors_package_does_not_import_the_runtime():
    code = "import sys, tackroom.executors\nassert 'tackroom._runtime' not in sys.modules, 'the runtime was imported'\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


async def test_a_pickled_plan_runs_in_another_process_with_classes_resolved_there(tmp_path):
    """What the ray executor does, without Ray: the plan crosses a process boundary as bytes."""
    task = write_task(tmp_path, 7)
    plan = TrialRuntime(tmp_path / "run", progress=False).plan(trial_for(task), task, oracle_plugins(tmp_path / "roots"), 1)
    (tmp_path / "plan.pkl").write_bytes(pickle.dumps(plan))
    code = ("import asyncio, pickle, sys\nfrom tackroom.executors import run_attempt\n"
            "plan = pickle.loads(open(sys.argv[1], 'rb').read())\n"
            "result, trajectory = asyncio.run(run_attempt(plan))\nprint(result.model_dump_json())\n")
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code, str(tmp_path / "plan.pkl"),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode == 0, err.decode()
    result = tackroom.TrialResult.model_validate_json(out.decode().strip().splitlines()[-1])
    assert result.reward == 1.0 and result.error is None and result.attempt == 1
    assert not any((tmp_path / "roots").iterdir()), "the other process tore its sandbox down"


def test_a_plan_made_in_this_process_keeps_its_live_objects_and_drops_them_when_pickled(tmp_path):
    task = write_task(tmp_path, 1)

    class Local(OracleHarness):  # importable by no other process: fine in this one
        """Defined inside a test."""

        name = "local-oracle"

    plugins = TrialPlugins(Local, Local.Options(max_output_chars=5), LocalSandboxProvider(), TestScriptVerifier,
                           TestScriptVerifier.Options())
    plan = TrialRuntime(tmp_path / "run", progress=False).plan(trial_for(task), task, plugins, 3)
    manager = PluginManager(load_entry_points=False)
    assert plan.harness.resolve(manager) == (Local, plugins.harness_options)
    assert plan.sandbox.provider(manager) is plugins.sandbox
    assert "<locals>" in plan.harness.reference
    shipped = pickle.loads(pickle.dumps(plan.verifier))
    assert shipped.resolve(manager) == (TestScriptVerifier, TestScriptVerifier.Options())
    with pytest.raises(ModuleNotFoundError):  # no live class on the other side: resolved by import, which fails
        pickle.loads(pickle.dumps(plan.harness.model_copy(update={"reference": "no_such_module_x:Local"}))).load(manager)


async def test_an_executor_gets_the_plan_and_the_runtime_fires_the_lifecycle_hooks_around_it(tmp_path):
    seen: list[tuple[str, object]] = []

    class Recording:
        @tackroom.hookimpl
        def tackroom_trial_started(self, trial):
            seen.append(("started", trial.id))

        @tackroom.hookimpl
        def tackroom_trial_finished(self, trial, result):
            seen.append(("finished", result.reward))

    class PlanOnly(Executor):
        """Never calls on_started (a worker that was lost before it began): the runtime still reports a start."""

        name = "plan-only"
        plans: list[AttemptPlan] = []

        async def run(self, plan, *, manager, on_started):
            self.plans.append(plan)
            return plan.blank_result(reward=0.5), tackroom.Trajectory(stop_reason="done")

    manager = PluginManager(load_entry_points=False)
    manager.register(Recording())
    task = write_task(tmp_path, 2)
    runtime = TrialRuntime(tmp_path / "run", progress=False, manager=manager, executor=PlanOnly(),
                           setup_timeout_sec=11)
    [result] = await runtime.run_all([(trial_for(task), task, oracle_plugins(tmp_path / "roots"))])
    assert result.reward == 0.5
    assert seen == [("started", result.trial_id), ("finished", 0.5)]
    [plan] = PlanOnly.plans
    assert plan.deadlines.setup_timeout_sec == 11 and plan.time_limit == runtime.deadlines.time_limit(task)

    seen.clear()
    runtime = TrialRuntime(tmp_path / "run2", progress=False, manager=manager, executor=AsyncioExecutor())
    [result] = await runtime.run_all([(trial_for(task), task, oracle_plugins(tmp_path / "roots"))])
    assert result.reward == 1.0 and seen == [("started", result.trial_id), ("finished", 1.0)]


async def test_run_attempt_never_raises_for_a_failed_attempt(tmp_path):
    task = write_task(tmp_path, 3)
    (task.path / "solution" / "solve.sh").write_text("exit 3\n")
    plan = TrialRuntime(tmp_path / "run", progress=False).plan(trial_for(task), task, oracle_plugins(tmp_path / "r"), 1)
    result, trajectory = await run_attempt(plan, manager=PluginManager(load_entry_points=False))
    assert result.reward == 0.0 and result.finished_at and "teardown" in result.timings
