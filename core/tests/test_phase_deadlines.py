"""A phase's deadline error reports the limit that actually ran out (issue 46: "verify ran past its 1020s limit"
after 68 s of verify was a sandbox command's own 60 s timeout, relabelled as the phase's)."""

from __future__ import annotations

import asyncio

import tackroom
import tackroom.testing
from tackroom import SandboxTimeoutError
from tackroom._builtins.oracle_harness import OracleHarness
from tackroom._builtins.test_script_verifier import TestScriptVerifier
from tackroom._manager import PluginManager
from tackroom._runtime import TrialPlugins, TrialRuntime
from tackroom._trial import Trial
from tackroom_local import LocalSandboxProvider


def run(tmp_path, provider: LocalSandboxProvider, toml: str | None = None, **deadlines) -> tackroom.TrialResult:
    task = tackroom.load_task(tackroom.testing.write_task(
        tmp_path, "t", instruction="do the thing", test_sh="echo 1 > /logs/verifier/reward.txt\n", solve_sh="true",
        toml=toml, agent_timeout_sec=20, verifier_timeout_sec=20))
    trial = Trial(task_id=task.id, task_path=str(task.path), harness="oracle", sandbox="local", verifier="test-script")
    plugins = TrialPlugins(OracleHarness, OracleHarness.Options(), provider, TestScriptVerifier,
                           TestScriptVerifier.Options())
    rt = TrialRuntime(tmp_path / "run", progress=False, manager=PluginManager(), attempts=1,
                      retry_backoff_sec=0.01, **deadlines)
    return asyncio.run(rt.run_trial(trial, task, plugins))


class RestoreTimesOut(LocalSandboxProvider):
    """Deliberately broken for the test: a grading step's own sandbox command times out (as a slow restore did)."""

    name = "restore-times-out"

    def create(self, spec):
        sb = super().create(spec)

        async def restore_image_tools(*, keep=()):
            await asyncio.sleep(0.2)
            raise SandboxTimeoutError("restoring the image's tools timed out after 0.2s")

        sb.restore_image_tools = restore_image_tools
        return sb


def test_a_sandbox_commands_own_timeout_inside_verify_is_reported_as_itself(tmp_path):
    result = run(tmp_path, RestoreTimesOut())
    error = result.error
    assert (error.error_class, error.phase, error.type) == ("infra", "verify", "SandboxTimeoutError"), error
    assert "restoring the image's tools timed out after 0.2s" in error.message and "limit" not in error.message, error


class HangsAtStart(LocalSandboxProvider):
    """Deliberately broken for the test: the sandbox never finishes starting."""

    name = "hangs-at-start"

    def create(self, spec):
        sb = super().create(spec)

        async def start():
            await asyncio.sleep(600)

        sb.start = start
        return sb


def test_a_phase_that_runs_out_reports_its_own_limit_and_the_time_it_ran(tmp_path):
    result = run(tmp_path, HangsAtStart(), toml="[environment]\nbuild_timeout_sec = 0.3\n", start_timeout_sec=0.4)
    error = result.error
    assert (error.phase, error.type) == ("sandbox_start", "PhaseTimeoutError"), error
    assert error.message.startswith("sandbox_start ran past its limit of 0.7s, after 0.7"), error
