"""A task whose network is an allowlist, on a sandbox that does not declare ``network_allowlist`` (modal here: its
provider loads and is asked, its cloud is never reached), is refused by name before the run: a load failure of
``tackroom run``, the rest of the run goes on, and an attempt that gets one anyway (train, matrix) ends as a
``task`` error at once, never an ``infra`` error retried and dropped. Sandboxes that enforce allowlists (local,
docker) are tested in their own packages."""

from __future__ import annotations

from pathlib import Path

import pytest

import tackroom
import tackroom_app
from tackroom import Trial
from tackroom_app import RunConfig, TrialPlugins, TrialRuntime, run_config

pytest.importorskip("tackroom_modal")


def write_task(root: Path, name: str, *, environment: str = "", verifier: str = "") -> Path:
    task = root / name
    (task / "tests").mkdir(parents=True)
    (task / "instruction.md").write_text("do nothing")
    (task / "task.toml").write_text(f"[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 30\n{verifier}"
                                    f"[environment]\n{environment}")
    (task / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    return task


async def test_tackroom_run_refuses_the_task_before_the_run_and_runs_the_rest(tmp_path):
    tasks = tmp_path / "tasks"
    write_task(tasks, "offline")
    write_task(tasks, "online", environment='network_mode = "public"\n')
    write_task(tasks, "mirror", verifier='allowed_hosts = ["pypi.org", "*.pythonhosted.org", "10.0.0.0/8"]\n')
    config = RunConfig.model_validate({"tasks": [str(tasks)], "harness": {"name": "nop"},
                                       "sandbox": {"name": "modal"}, "runtime": {"out": str(tmp_path / "runs")}})
    run_dir, results, failures = await run_config(config, progress=False, run_id="r")
    assert [f.path.name for f in failures] == ["mirror"]
    assert failures[0].message == ("the 'modal' sandbox cannot enforce a network allowlist (no network for the agent, "
                                   "only pypi.org, *.pythonhosted.org, 10.0.0.0/8 for grading): run it on a sandbox "
                                   "that can (local, docker)")
    # the other tasks ran (and failed on modal's missing credentials, as any modal trial does here): not refused
    assert sorted(r.task for r in results) == ["offline", "online"]
    assert all("allowlist" not in (r.error.message if r.error else "") for r in results)


async def test_an_attempt_that_gets_one_anyway_is_a_task_error_at_once_never_retried(tmp_path):
    task = tackroom.load_task(write_task(tmp_path, "mirror", environment='allowed_hosts = ["pypi.org"]\n'))
    manager = tackroom_app.PluginManager()
    nop, verifier = manager.get("harness", "nop"), manager.get("verifier", "test-script")
    trial = Trial(task_id=task.id, task_path=str(task.path), harness="nop", sandbox="modal", verifier="test-script")
    modal = manager.get("sandbox", "modal")
    assert "network_allowlist" not in modal.capabilities
    plugins = TrialPlugins(nop, nop.Options(), modal(), verifier, verifier.Options())
    runtime = TrialRuntime(tmp_path / "run", attempts=3, progress=False, manager=manager, retry_backoff_sec=0.01)
    result = await runtime.run_trial(trial, task, plugins)
    assert result.error is not None and result.error.error_class == "task", result.error
    assert result.error.phase == "sandbox_start" and "cannot enforce a network allowlist" in result.error.message
    assert result.attempt == 1 and result.previous_attempts == []
