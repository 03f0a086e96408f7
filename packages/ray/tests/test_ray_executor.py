"""The ray executor on a real local Ray cluster: same results as asyncio, dead workers, deadlines, resume, caps."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import signal
import subprocess
import sys
import time
import types
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest
from misbehaving_harnesses import (
    BlocksItsLoop,
    KillsItsWorker,
    ReportsItsProcess,
    WaitsToBeKilled,
    harness_checks_here,
    sandbox_checks_here,
)

import tackroom
import tackroom.testing
import tackroom_app
from tackroom import Trial
from tackroom.executors import ExecutorUnavailableError
from tackroom_app import TrialPlugins, TrialRuntime
from tackroom_local import LocalSandboxProvider
from tackroom_ray import RayOptions

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "tasks"
OracleHarness = tackroom_app.get_plugin_manager().get("harness", "oracle")  # built-ins, by name
TestScriptVerifier = tackroom_app.get_plugin_manager().get("verifier", "test-script")
REWARD_SH = '[ "$(cat /app/out.txt)" = "{i}" ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n'


def write_task(root: Path, name: str, i: int = 0, solve_extra: str = "", agent_timeout: float = 120) -> tackroom.Task:
    return tackroom.load_task(tackroom.testing.write_task(
        root, name, instruction=f"Write {i} to /app/out.txt", solve_sh=f"{solve_extra}echo {i} > /app/out.txt\n",
        test_sh=REWARD_SH.format(i=i), agent_timeout_sec=agent_timeout, verifier_timeout_sec=60))


def trial_for(task: tackroom.Task, harness: str = "oracle", pass_index: int = 0) -> Trial:
    return Trial(task_id=task.id, task_path=str(task.path), harness=harness, sandbox="local",
                 verifier="test-script", pass_index=pass_index)


def plugins(harness_cls=OracleHarness, sandbox=None, **options) -> TrialPlugins:
    return TrialPlugins(harness_cls, harness_cls.Options(**options), sandbox or LocalSandboxProvider(),
                        TestScriptVerifier, TestScriptVerifier.Options())


def roots_in(tmp_path: Path) -> LocalSandboxProvider:
    """A local sandbox provider whose per-trial roots live in the test's directory (a killed worker leaves its root)."""
    return LocalSandboxProvider({"root_dir": str(tmp_path / "roots")})


def ray_runtime(run_dir: Path, manager=None, attempts: int = 3, concurrency: int = 4, teardown_timeout_sec: float = 10,
                **ray_options) -> TrialRuntime:
    return TrialRuntime(run_dir, attempts=attempts, concurrency=concurrency, retry_backoff_sec=0.01, progress=False,
                        teardown_timeout_sec=teardown_timeout_sec, manager=manager or tackroom_app.PluginManager(),
                        executor="ray", executor_options=RayOptions(**ray_options))


@pytest.fixture
def writes(monkeypatch) -> Counter:
    """How often the driver wrote each run-directory file (workers never touch the run directory): the runtime
    writes a file atomically, a temporary file renamed over it, so each write is one ``Path.replace`` onto it."""
    counts: Counter = Counter()
    real = Path.replace

    def counting(self, target):
        counts[str(target)] += 1
        return real(self, target)

    monkeypatch.setattr(Path, "replace", counting)
    return counts


def assert_written_once(run_dir: Path, results, writes: Counter) -> None:
    for r in results:
        files = sorted(p.name for p in (run_dir / r.trial_id).iterdir())
        assert files == ["result.json", "trajectory.json"], files
        for name in files:
            assert writes[str(run_dir / r.trial_id / name)] == 1, f"{r.trial_id}/{name} written {writes[str(run_dir / r.trial_id / name)]}×"
        saved = json.loads((run_dir / r.trial_id / "result.json").read_text())
        assert saved["attempt"] == r.attempt and saved["reward"] == r.reward


def peak_overlap(results) -> int:
    """Most attempts running at once (each from its start in the worker to its end)."""
    stamps = [(datetime.fromisoformat(r.started_at), datetime.fromisoformat(r.finished_at)) for r in results]
    edges = sorted([(start, 1) for start, _ in stamps] + [(end, -1) for _, end in stamps])
    peak = running = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


def outcome(r) -> tuple:
    """What must not depend on the executor."""
    return (r.trial_id, r.task, r.reward, r.components, r.error_class, r.error.type if r.error else None,
            r.error.phase if r.error else None, r.stop_reason, r.attempt, sorted(r.metrics), r.domain)


async def test_oracle_on_the_examples_gives_the_same_results_under_ray_and_asyncio(ray_cluster, tmp_path, writes):
    tasks = tackroom_app.load_dataset(EXAMPLES).tasks
    shared = plugins()
    items = [(trial_for(t), t, shared) for t in tasks]
    local = await TrialRuntime(tmp_path / "asyncio", concurrency=5, progress=False).run_all(items)
    remote = await ray_runtime(tmp_path / "ray", concurrency=5).run_all(items)
    assert [outcome(r) for r in remote] == [outcome(r) for r in local]
    assert {r.task: r.reward for r in remote} == {t.id: 1.0 for t in tasks}
    slow = next(r for r in remote if r.task == "slow-agent")
    assert slow.error.error_class == "model" and slow.error.type == "AgentTimeoutError"
    assert_written_once(tmp_path / "ray", remote, writes)
    for r in remote:
        here = json.loads((tmp_path / "asyncio" / r.trial_id / "trajectory.json").read_text())
        there = json.loads((tmp_path / "ray" / r.trial_id / "trajectory.json").read_text())
        assert there == here, f"{r.trial_id}: trajectories differ"


async def test_every_attempt_runs_in_a_ray_worker_process(ray_cluster, tmp_path):
    task = write_task(tmp_path, "where", 3)
    items = [(trial_for(task, "reports-its-process", i), task, plugins(ReportsItsProcess)) for i in range(3)]
    results = await ray_runtime(tmp_path / "run").run_all(items)
    assert [r.reward for r in results] == [1.0, 1.0, 1.0]
    assert os.getpid() not in {int(r.metrics["pid"]) for r in results}
    assert {r.metrics["uvloop"] for r in results} == {0.0}, "attempts run on the standard asyncio loop, as in-process"


def test_tackroom_run_executor_ray_attaches_to_a_running_cluster(ray_cluster, tmp_path):
    address = ray_cluster.get_runtime_context().gcs_address

    def run(*extra, env=None):
        out = subprocess.run(
            [sys.executable, "-m", "tackroom_app", "run", str(EXAMPLES / "hello-file"), str(EXAMPLES / "csv-totals"),
             "--out", str(tmp_path), "--json", *extra],
            capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout)

    on_ray = run("--executor", "ray", "--run-id", "on-ray", env={"RAY_ADDRESS": address})
    in_process = run("--run-id", "in-process")
    keep = ("task", "reward", "components", "error", "attempt")
    assert [{k: t[k] for k in keep} for t in on_ray["trials"]] == [{k: t[k] for k in keep} for t in in_process["trials"]]
    assert on_ray["mean_reward"] == 1.0
    assert json.loads((tmp_path / "on-ray" / "run.json").read_text())["runtime"]["executor"] == "ray"


def test_sandbox_conformance_checks_pass_inside_a_ray_task(ray_cluster):
    task = ray_cluster.remote(num_cpus=0.2, max_retries=0)(sandbox_checks_here)
    out = ray_cluster.get(task.remote(), timeout=600)
    assert out["pid"] != os.getpid()
    report = tackroom.testing.SandboxCheckReport.model_validate(out["report"])
    report.assert_ok()
    assert len(report.results) >= 10


def test_harness_conformance_checks_pass_inside_a_ray_task(ray_cluster):
    task = ray_cluster.remote(num_cpus=0.2, max_retries=0)(harness_checks_here)
    out = ray_cluster.get(task.remote(), timeout=600)
    assert out["pid"] != os.getpid()
    report = tackroom.testing.HarnessCheckReport.model_validate(out["report"])
    report.assert_ok()
    assert {r.name for r in report.results} >= {"solves_task", "agent_timeout"}


async def test_a_worker_that_kills_itself_is_an_infra_error_retried_and_written_once(ray_cluster, tmp_path, writes):
    task = write_task(tmp_path, "dies", 5)
    harness = plugins(KillsItsWorker, sandbox=roots_in(tmp_path), marker_dir=str(tmp_path / "markers"))
    run_dir = tmp_path / "run"
    [result] = await ray_runtime(run_dir, attempts=3).run_all([(trial_for(task, "kills-its-worker"), task, harness)])
    assert result.reward == 1.0 and result.error is None and result.attempt == 2
    [lost] = result.previous_attempts
    assert lost.error.error_class == "infra" and lost.error.type == "WorkerLostError"
    assert "WorkerCrashedError" in lost.error.message and "pid" in lost.error.message
    assert_written_once(run_dir, [result], writes)


async def test_killing_the_worker_from_outside_mid_trial_takes_its_sandbox_down_and_the_trial_is_retried(
        ray_cluster, tmp_path, writes):
    task = write_task(tmp_path, "victim", 7)
    markers, roots = tmp_path / "markers", tmp_path / "roots"
    harness = plugins(WaitsToBeKilled, sandbox=LocalSandboxProvider({"root_dir": str(roots)}),
                      marker_dir=str(markers), seconds=300)
    run_dir = tmp_path / "run"
    job = asyncio.create_task(ray_runtime(run_dir).run_all([(trial_for(task, "waits-to-be-killed"), task, harness)]))
    pid_file = markers / "victim.pid"
    for _ in range(1200):
        if pid_file.exists() and pid_file.read_text():
            break
        assert not job.done(), job
        await asyncio.sleep(0.1)
    pid = int(pid_file.read_text())
    sandbox_root = next(roots.iterdir())
    assert pid != os.getpid()
    os.kill(pid, signal.SIGKILL)
    [result] = await asyncio.wait_for(job, 300)
    assert result.reward == 1.0 and result.attempt == 2
    assert result.previous_attempts[0].error.type == "WorkerLostError" and str(pid) in result.previous_attempts[0].error.message
    assert_written_once(run_dir, [result], writes)
    survivors = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_mentions(p, str(sandbox_root))]
    assert not survivors, "the dead worker's bubblewrap sandbox outlived it"


def _cmdline_mentions(proc: Path, text: str) -> bool:
    try:
        return text in (proc / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


async def test_a_worker_dying_on_every_attempt_ends_as_an_infra_error_after_the_attempts(ray_cluster, tmp_path, writes):
    task = write_task(tmp_path, "always", 1)
    harness = plugins(KillsItsWorker, sandbox=roots_in(tmp_path), marker_dir=str(tmp_path / "m"), every_attempt=True)
    run_dir = tmp_path / "run"
    [result] = await ray_runtime(run_dir, attempts=2).run_all([(trial_for(task, "kills-its-worker"), task, harness)])
    assert result.error.error_class == "infra" and result.error.type == "WorkerLostError"
    assert result.attempt == 2 and len(result.previous_attempts) == 1 and result.reward is None
    assert result.stop_reason == "worker_lost" and not result.counted
    assert_written_once(run_dir, [result], writes)


async def test_an_attempt_that_blocks_its_event_loop_is_cancelled_at_its_deadline_and_retried(ray_cluster, tmp_path):
    task = write_task(tmp_path, "stuck", 2)
    harness = plugins(BlocksItsLoop, sandbox=roots_in(tmp_path), marker_dir=str(tmp_path / "m"), seconds=600)
    started = time.monotonic()
    # 45 s: the retry's whole attempt (a fresh Ray worker, a sandbox, the oracle) must fit in it too, and on
    # this 2-core machine under the parallel suite a fresh worker alone has taken ~20 s (CI: three attempts
    # at 20 s each all ran out).
    [result] = await ray_runtime(tmp_path / "run", attempt_timeout_sec=45, teardown_timeout_sec=2).run_all(
        [(trial_for(task, "blocks-its-loop"), task, harness)])
    attempts = [(a.attempt, a.error and (a.error.type, a.error.message[:200])) for a in result.previous_attempts]
    assert (result.reward, result.attempt) == (1.0, 2), (result.error, attempts)
    [hung] = result.previous_attempts
    assert hung.error.error_class == "infra" and hung.error.type == "AttemptDeadlineError"
    assert "attempt_timeout_sec" in hung.error.message
    assert time.monotonic() - started < 200, "the hung worker was not killed"


async def test_fifty_concurrent_oracle_trials_on_the_local_sandbox_with_zero_errors(ray_cluster, tmp_path, writes):
    tasks = [write_task(tmp_path / "tasks", f"t{i:02d}", i) for i in range(50)]
    items = [(trial_for(t, "reports-its-process"), t, plugins(ReportsItsProcess)) for t in tasks]
    run_dir = tmp_path / "run"
    started = time.monotonic()
    results = await ray_runtime(run_dir, num_cpus_per_trial=0.25, max_concurrency=50).run_all(items)
    elapsed = time.monotonic() - started
    assert [(r.trial_id, r.error) for r in results if r.error] == []
    assert [r.reward for r in results] == [1.0] * 50 and all(r.attempt == 1 for r in results)
    assert_written_once(run_dir, results, writes)
    pids = {int(r.metrics["pid"]) for r in results}
    assert os.getpid() not in pids and len(pids) >= 2, pids
    assert peak_overlap(results) >= 2
    print(f"50 oracle trials on ray: {elapsed:.1f}s, {len(pids)} worker processes, peak {peak_overlap(results)} at once")


async def test_resume_under_ray_reruns_only_missing_and_infra_trials_and_hooks_fire_in_the_driver(ray_cluster, tmp_path):
    seen: list[tuple[str, str]] = []
    manager = tackroom_app.PluginManager()
    observer = types.ModuleType("observer")
    observer.tackroom_trial_started = tackroom.hookimpl(lambda trial: seen.append(("start", trial.id)))
    observer.tackroom_trial_finished = tackroom.hookimpl(lambda trial, result: seen.append(("end", trial.id)))
    manager.register(observer)
    task = write_task(tmp_path, "again", 4)
    items = [(trial_for(task, pass_index=i), task, plugins()) for i in range(4)]
    run_dir = tmp_path / "run"
    first = await ray_runtime(run_dir, manager=manager).run_all(items)
    assert [r.reward for r in first] == [1.0] * 4
    assert sorted(seen) == sorted([("start", t.id) for t, _, _ in items] + [("end", t.id) for t, _, _ in items])

    gone, broken = first[1].trial_id, first[2].trial_id
    for name in ("result.json", "trajectory.json"):
        (run_dir / gone / name).unlink()
    data = json.loads((run_dir / broken / "result.json").read_text())
    data.update(reward=None, error={"class": "infra", "type": "SandboxError", "message": "x", "phase": "sandbox_start"})
    (run_dir / broken / "result.json").write_text(json.dumps(data))
    seen.clear()
    again = await ray_runtime(run_dir, manager=manager).run_all(items)
    assert sorted(seen) == sorted([("start", gone), ("start", broken), ("end", gone), ("end", broken)])
    assert [r.reward for r in again] == [1.0] * 4
    assert [r.finished_at for i, r in enumerate(again) if i in (0, 3)] == [first[0].finished_at, first[3].finished_at]


async def test_max_concurrency_and_a_custom_resource_cap_trials_in_flight(ray_cluster, tmp_path):
    task = write_task(tmp_path, "capped", 6, solve_extra="sleep 2\n")
    harness = plugins(ReportsItsProcess)
    items = [(trial_for(task, "reports-its-process", i), task, harness) for i in range(6)]
    by_cap = await ray_runtime(tmp_path / "a", concurrency=6, max_concurrency=2).run_all(items)
    assert all(r.reward == 1.0 for r in by_cap) and peak_overlap(by_cap) <= 2
    # The cluster has test_slot = 2: a resource label caps every driver on the cluster, not just this run.
    by_label = await ray_runtime(tmp_path / "b", concurrency=6, resources={"test_slot": 1}).run_all(items)
    assert all(r.reward == 1.0 for r in by_label) and peak_overlap(by_label) <= 2


async def test_node_affinity_and_placement_no_node_can_satisfy(ray_cluster, tmp_path):
    task = write_task(tmp_path, "pinned", 8)
    node = ray_cluster.get_runtime_context().get_node_id()
    [pinned] = await ray_runtime(tmp_path / "a", node_id=node).run_all([(trial_for(task), task, plugins())])
    assert pinned.reward == 1.0
    with pytest.raises(ExecutorUnavailableError, match=r"no node of the cluster has .*'gpu_box': 1.*--resources"):
        await ray_runtime(tmp_path / "b", resources={"gpu_box": 1}).run_all([(trial_for(task), task, plugins())])
    with pytest.raises(ExecutorUnavailableError, match=r"node_id: no live node 'ffff'"):
        await ray_runtime(tmp_path / "c", node_id="ffff").run_all([(trial_for(task), task, plugins())])


async def test_cancelling_the_driver_tears_down_the_sandbox_in_the_worker(ray_cluster, tmp_path):
    task = write_task(tmp_path, "endless", 9, solve_extra="sleep 600\n", agent_timeout=600)
    roots = tmp_path / "roots"
    harness = plugins(sandbox=LocalSandboxProvider({"root_dir": str(roots)}))
    # the teardown gets a minute: this checks that the worker tears down when the driver is cancelled, not how fast
    # a loaded machine kills a sandbox (the 10 s default here was once too little in the full suite)
    job = asyncio.create_task(ray_runtime(tmp_path / "run", teardown_timeout_sec=60)
                              .run_all([(trial_for(task), task, harness)]))
    for _ in range(1200):
        if roots.exists() and any((p / "solution" / "solve.sh").exists() for p in roots.iterdir()):
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the attempt never started")
    await asyncio.sleep(1.0)
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    for _ in range(900):
        if not any(roots.iterdir()):
            break
        await asyncio.sleep(0.1)
    assert not any(roots.iterdir()), "the worker did not tear its sandbox down"
    assert not (tmp_path / "run" / trial_for(task).id).exists(), "a cancelled trial leaves no result"


async def test_a_worker_whose_cancel_interrupt_went_astray_still_tears_down_on_rays_flag(tmp_path, monkeypatch):
    """Ray raises KeyboardInterrupt in the worker for a soft cancel, and sets a flag. A worker once ran on past
    the interrupt (the driver then force-killed it and its sandbox stayed behind); the heartbeat reads the flag.
    No cluster: the worker's entry point runs in a thread, with a runtime context that only raises the flag."""
    from tackroom_ray import executor as ray_executor

    task = write_task(tmp_path, "endless", 9, solve_extra="sleep 600\n", agent_timeout=600)
    roots = tmp_path / "roots"
    plan = TrialRuntime(tmp_path / "run", progress=False).plan(trial_for(task), task, plugins(sandbox=roots_in(tmp_path)), 1)
    plan = pickle.loads(pickle.dumps(plan))  # as a worker gets it

    class Context:
        """Ray's runtime context as a worker sees it: cancelled once the agent runs; no interrupt is raised."""

        def is_canceled(self) -> bool:
            return roots.exists() and any((p / "solution" / "solve.sh").exists() for p in roots.iterdir() if p.is_dir())

    monkeypatch.setattr(ray_executor, "_runtime_context", Context)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(asyncio.to_thread(ray_executor._run_with_heartbeat, plan), 120)
    assert not any(roots.iterdir()), "the attempt was cancelled and its sandbox torn down"


async def test_a_plugin_missing_on_the_worker_node_is_an_infra_error_naming_the_import(ray_cluster, tmp_path, monkeypatch):
    """A harness the driver can import but the workers cannot (a distribution installed on one node only)."""
    only_here = tmp_path / "driver_only"
    only_here.mkdir()
    (only_here / "driver_only_harness.py").write_text(
        "import tackroom_app\n\nOracleHarness = tackroom_app.get_plugin_manager().get('harness', 'oracle')\n\n"
        "class DriverOnly(OracleHarness):\n    '''Installed on the driver's machine only.'''\n\n    name = 'driver-only'\n")
    monkeypatch.syspath_prepend(str(only_here))
    from driver_only_harness import DriverOnly

    task = write_task(tmp_path, "nowhere", 1)
    [result] = await ray_runtime(tmp_path / "run", attempts=2).run_all([(trial_for(task, "driver-only"), task,
                                                                          plugins(DriverOnly))])
    assert result.error.error_class == "infra" and result.error.type == "ModuleNotFoundError"
    assert "driver_only_harness" in result.error.message and result.error.phase == "executor"
    assert result.attempt == 2 and result.stop_reason == "worker_error"
