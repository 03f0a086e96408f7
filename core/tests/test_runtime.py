"""The trial runtime: phases, classification, retries, teardown, resume, hooks, and the test-script verifier."""

import asyncio
import json
import os
import signal
import types
from pathlib import Path

import pytest

import tackroom
import tackroom.services
import tackroom.testing
from tackroom._builtins.nop_harness import NopHarness
from tackroom._builtins.oracle_harness import OracleHarness
from tackroom._builtins.test_script_verifier import TestScriptVerifier
from tackroom._manager import PluginManager
from tackroom._runtime import TrialPlugins, TrialRuntime
from tackroom._task import load_dataset
from tackroom._trial import Trial
from tackroom_local import LocalSandboxProvider

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


def trial_for(task: tackroom.Task, harness: str = "oracle", pass_index: int = 0) -> Trial:
    return Trial(task_id=task.id, task_path=str(task.path), harness=harness, sandbox="local",
                 verifier="test-script", pass_index=pass_index)


def plugins(harness_cls=OracleHarness, sandbox=None) -> TrialPlugins:
    return TrialPlugins(harness_cls, harness_cls.Options(), sandbox or LocalSandboxProvider(),
                        TestScriptVerifier, TestScriptVerifier.Options())


def runtime(tmp_path, manager=None, **kw) -> TrialRuntime:
    kw.setdefault("retry_backoff_sec", 0.01)
    return TrialRuntime(tmp_path / "run", progress=False, manager=manager or PluginManager(), **kw)


def write_task(root: Path, name: str, test_sh: str, solve_sh: str = "true", toml: str | None = None) -> tackroom.Task:
    return tackroom.load_task(tackroom.testing.write_task(root, name, instruction="do the thing", test_sh=test_sh,
                                                          solve_sh=solve_sh, toml=toml, agent_timeout_sec=20,
                                                          verifier_timeout_sec=20))


async def test_oracle_scores_one_and_nop_zero_on_every_example(tmp_path):
    tasks = load_dataset(EXAMPLES).tasks
    rt = runtime(tmp_path, concurrency=5)
    oracle = await rt.run_all([(trial_for(t), t, plugins()) for t in tasks])
    assert {r.task: r.reward for r in oracle} == {t.id: 1.0 for t in tasks}
    nop = await rt.run_all([(trial_for(t, "nop"), t, plugins(NopHarness)) for t in tasks])
    assert all(r.reward == 0.0 for r in nop), [(r.task, r.reward, r.error) for r in nop]
    slow = next(r for r in oracle if r.task == "slow-agent")
    assert slow.error.error_class == "model" and slow.error.type == "AgentTimeoutError"
    assert slow.timings["harness_run"] < 6
    report = next(r for r in oracle if r.task == "report-files")
    assert report.components == {"reward": 1.0, "summary": 1.0, "numbers": 1.0, "status": 1.0}
    files = sorted(p.name for p in (tmp_path / "run" / report.trial_id).iterdir())
    assert files == ["result.json", "trajectory.json"]
    saved = json.loads((tmp_path / "run" / report.trial_id / "result.json").read_text())
    assert saved["reward"] == 1.0 and saved["error"] is None and set(saved["timings"]) >= {
        "sandbox_start", "harness_setup", "harness_run", "verify", "teardown", "total"}


async def test_a_planted_reward_is_deleted_and_a_missing_reward_is_a_task_error(tmp_path):
    task = write_task(tmp_path, "plant", test_sh="echo tests ran\n",
                      solve_sh="mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\n")
    result = await runtime(tmp_path).run_trial(trial_for(task), task, plugins())
    assert result.reward is None and result.error.error_class == "task"
    assert "never a pass" in result.error.message and result.attempt == 1


@pytest.mark.parametrize("test_sh, message", [
    ("echo one > /logs/verifier/reward.txt\n", "must hold one number"),
    ("echo '{\"a\": \"x\"}' > /logs/verifier/reward.json\n", "non-empty object of numbers"),
    ("echo 'nope' > /logs/verifier/reward.json\n", "is not JSON"),
])
async def test_unparsable_rewards_are_task_errors(tmp_path, test_sh, message):
    task = write_task(tmp_path, "bad", test_sh=test_sh)
    result = await runtime(tmp_path).run_trial(trial_for(task), task, plugins())
    assert result.error.error_class == "task" and message in result.error.message


async def test_missing_test_script_is_a_task_error(tmp_path):
    task = write_task(tmp_path, "notest", test_sh="")
    (task.tests_dir / "test.sh").unlink()
    result = await runtime(tmp_path).run_trial(trial_for(task), task, plugins())
    assert result.error.error_class == "task" and "tests/test.sh: missing" in result.error.message


class KillsItsSandbox(tackroom.Harness):
    """Kills the sandbox under itself on the first attempt (a sandbox that dies mid-trial)."""

    name = "kills-sandbox"
    attempts = 0

    async def run(self, task, sandbox, policy):
        type(self).attempts += 1
        if type(self).attempts == 1:
            os.killpg(sandbox.namespaces.proc.pid, signal.SIGKILL)
            await asyncio.sleep(0.2)
        await sandbox.exec("echo 1 > /app/done")
        return tackroom.Trajectory()


async def test_tackroom_classify_error_default_rules_retry_a_dead_sandbox(tmp_path):
    task = write_task(tmp_path, "die", test_sh="[ -f /app/done ] && echo 1 > /logs/verifier/reward.txt\n")
    KillsItsSandbox.attempts = 0
    result = await runtime(tmp_path, attempts=3).run_trial(trial_for(task, "kills-sandbox"), task, plugins(KillsItsSandbox))
    assert result.reward == 1.0 and result.attempt == 2
    assert result.previous_attempts[0].error.error_class == "infra"
    assert result.previous_attempts[0].error.type == "SandboxError"


async def test_infra_failures_stop_after_the_configured_attempts(tmp_path):
    class AlwaysDies(KillsItsSandbox):
        """Kills its sandbox every time."""

        name = "always-dies"

        async def run(self, task, sandbox, policy):
            os.killpg(sandbox.namespaces.proc.pid, signal.SIGKILL)
            await asyncio.sleep(0.1)
            await sandbox.exec("true")

    task = write_task(tmp_path, "die2", test_sh="")
    result = await runtime(tmp_path, attempts=2).run_trial(trial_for(task), task, plugins(AlwaysDies))
    assert result.error.error_class == "infra" and result.attempt == 2 and len(result.previous_attempts) == 1


async def test_tackroom_classify_error_plugin_answer_wins(tmp_path):
    class Raises(tackroom.Harness):
        """Raises a ValueError."""

        name = "raises"

        async def run(self, task, sandbox, policy):
            raise ValueError("bad tool schema")

    manager = PluginManager()
    mod = types.ModuleType("policy_plugin")
    mod.tackroom_classify_error = tackroom.hookimpl(
        lambda error, phase: "task" if isinstance(error, ValueError) and phase == "harness_run" else None)
    manager.register(mod)
    task = write_task(tmp_path, "cls", test_sh="")
    result = await runtime(tmp_path, manager=manager, attempts=3).run_trial(trial_for(task), task, plugins(Raises))
    assert result.error.error_class == "task" and result.attempt == 1
    default = await runtime(tmp_path / "d", attempts=2).run_trial(trial_for(task), task, plugins(Raises))
    assert default.error.error_class == "infra" and default.attempt == 2


async def test_teardown_runs_when_the_trial_is_cancelled(tmp_path):
    task = write_task(tmp_path, "hang", test_sh="", solve_sh="sleep 600\n", toml="[agent]\ntimeout_sec = 600\n")
    roots = tmp_path / "roots"
    provider = LocalSandboxProvider({"root_dir": str(roots)})
    job = asyncio.create_task(runtime(tmp_path).run_trial(trial_for(task), task, plugins(sandbox=provider)))
    for _ in range(100):
        await asyncio.sleep(0.05)
        if roots.exists() and any(roots.iterdir()):
            break
    await asyncio.sleep(0.3)
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    assert not any(roots.iterdir()), "the sandbox root was removed by teardown"


async def test_a_hanging_teardown_is_time_limited_and_noted(tmp_path):
    class SlowStop(LocalSandboxProvider):
        """Local sandboxes whose stop hangs."""

        name = "slow-stop"

        def create(self, spec):
            sb = super().create(spec)
            real_stop = sb.stop

            async def stop():
                await real_stop()
                await asyncio.sleep(30)

            sb.stop = stop
            return sb

    task = write_task(tmp_path, "t", test_sh="echo 1 > /logs/verifier/reward.txt\n")
    rt = runtime(tmp_path, teardown_timeout_sec=0.5)
    result = await rt.run_trial(trial_for(task), task, plugins(sandbox=SlowStop()))
    assert result.reward == 1.0 and result.timings["teardown"] < 2
    assert any("teardown failed: TimeoutError" in n for n in result.notes)


async def test_tackroom_trial_started_and_tackroom_trial_finished_hooks_and_resume(tmp_path):
    seen = []
    manager = PluginManager()
    mod = types.ModuleType("observer")
    mod.tackroom_trial_started = tackroom.hookimpl(lambda trial: seen.append(("start", trial.id)))
    mod.tackroom_trial_finished = tackroom.hookimpl(lambda trial, result: seen.append(("end", result.reward)))
    manager.register(mod)
    task = write_task(tmp_path, "r", test_sh="echo 1 > /logs/verifier/reward.txt\n")
    items = [(trial_for(task, pass_index=i), task, plugins()) for i in range(3)]
    first = await runtime(tmp_path, manager=manager).run_all(items)
    assert [r.reward for r in first] == [1.0, 1.0, 1.0]
    ids = [f"r-{task.source_hash[:10]}__oracle__p{i}" for i in range(3)]  # name + content hash, label, pass
    assert sorted(seen) == [("end", 1.0)] * 3 + [("start", tid) for tid in ids]
    seen.clear()
    again = await runtime(tmp_path, manager=manager).run_all(items)
    assert seen == [] and [r.trial_id for r in again] == [r.trial_id for r in first]


async def test_concurrency_limit_is_respected(tmp_path):
    task = write_task(tmp_path, "c", test_sh="echo 1 > /logs/verifier/reward.txt\n", solve_sh="sleep 0.3\n")
    running, peak = 0, 0

    class Counting(OracleHarness):
        """Counts concurrent runs."""

        name = "counting"

        async def run(self, task, sandbox, policy):
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            try:
                return await super().run(task, sandbox, policy)
            finally:
                running -= 1

    items = [(trial_for(task, pass_index=i), task, plugins(Counting)) for i in range(6)]
    results = await runtime(tmp_path, concurrency=2).run_all(items)
    assert peak == 2 and all(r.reward == 1.0 for r in results)


async def test_outcomes_carry_the_written_trajectory_fresh_and_resumed(tmp_path):
    class Says(tackroom.Harness):
        name = "says"

        async def run(self, task, sandbox, policy):
            return tackroom.Trajectory(final_answer="sk-live-" + "x" * 24, stop_reason="completed")

    tackroom.services.register_secret("sk-live-" + "x" * 24)
    task = write_task(tmp_path, "t", "echo 1 > /logs/verifier/reward.txt")
    items = [(trial_for(task, "says"), task, plugins(Says))]
    rt = runtime(tmp_path)
    (fresh,) = await rt.run_outcomes(items)
    assert fresh.result.reward == 1.0 and fresh.trajectory.stop_reason == "completed"
    on_disk = json.loads((rt.run_dir / fresh.result.trial_id / "trajectory.json").read_text())
    assert fresh.trajectory.model_dump(mode="json") == on_disk and "x" * 24 not in fresh.trajectory.final_answer
    (resumed,) = await runtime(tmp_path).run_outcomes(items)
    assert resumed.trajectory == fresh.trajectory and resumed.result.trial_id == fresh.result.trial_id


def test_the_attempt_time_limit_is_the_sum_of_the_phase_limits(tmp_path):
    from tackroom._attempt import KILL_TIMEOUT_SEC, VERIFY_GRACE_SEC

    task = write_task(tmp_path, "t", "true", toml="[agent]\ntimeout_sec = 10\n[verifier]\ntimeout_sec = 20\n")
    rt = runtime(tmp_path, setup_timeout_sec=7, teardown_timeout_sec=3)
    env = task.config.environment
    regrade = env.build_timeout_sec + 120 + 7 + 20 + VERIFY_GRACE_SEC + 3  # an untouched sandbox, graded
    assert rt.deadlines.time_limit(task) == (env.build_timeout_sec + 120 + 2 * 7 + 10 + KILL_TIMEOUT_SEC + 5
                                            + 20 + VERIFY_GRACE_SEC + regrade + 3)
    separate = write_task(tmp_path, "s", "true", toml="[agent]\ntimeout_sec = 10\n[verifier]\ntimeout_sec = 20\n"
                                                      'grading = "separate"\n')
    assert rt.deadlines.time_limit(separate) == rt.deadlines.time_limit(task) + regrade


async def test_a_sandbox_hanging_at_start_or_setup_is_infra_within_its_phase_limit(tmp_path):
    class HangsAtStart(LocalSandboxProvider):
        name = "hangs-at-start"

        def create(self, spec):
            sb = super().create(spec)

            async def start():
                await asyncio.sleep(600)

            sb.start = start
            return sb

    class HangsInSetup(OracleHarness):
        name = "hangs-in-setup"

        async def setup(self, sandbox, task):
            await asyncio.sleep(600)

    task = write_task(tmp_path, "t", test_sh="echo 1 > /logs/verifier/reward.txt\n",
                      toml="[environment]\nbuild_timeout_sec = 0.5\n[agent]\ntimeout_sec = 20\n")
    rt = runtime(tmp_path, attempts=1, start_timeout_sec=0.5, setup_timeout_sec=0.5)
    started = await rt.run_trial(trial_for(task), task, plugins(sandbox=HangsAtStart()))
    assert (started.error.error_class, started.error.phase, started.error.type) == ("infra", "sandbox_start", "PhaseTimeoutError")
    assert started.timings["sandbox_start"] < 2
    set_up = await runtime(tmp_path / "s", attempts=1, setup_timeout_sec=0.5).run_trial(trial_for(task), task, plugins(HangsInSetup))
    assert (set_up.error.error_class, set_up.error.phase) == ("infra", "harness_setup") and set_up.timings["harness_setup"] < 2
