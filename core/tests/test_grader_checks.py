"""The kit's checks of the grader's isolation catch a sandbox with one defence missing, and skip what cannot apply."""

from __future__ import annotations

from tackroom import ExecResult
from tackroom.testing.grader_checks import GRADER_CHECKS
from tackroom.testing.sandbox_checks import ALL_CHECKS, run_sandbox_checks
from tackroom_local import LocalSandboxProvider


async def only(provider, *names: str):
    report = await run_sandbox_checks(provider, skip=set(ALL_CHECKS) - set(names), check_timeout=120)
    return {r.name: r for r in report.results if r.name != "start"}


class LeaksTheEnvironment(LocalSandboxProvider):
    """Local sandboxes whose grader runs with the sandbox's environment as it is (no scrubbing, the usual HOME)."""

    name = "leaks-the-environment"

    def create(self, spec):
        sandbox = super().create(spec)

        async def run_grader(cmd, *, private, collect, dest, cwd=None, env=None, timeout=600.0) -> ExecResult:
            result = await sandbox.exec(cmd, cwd=cwd, env=env, timeout=timeout)
            await sandbox.download(collect, dest)
            return result

        sandbox.run_grader = run_grader
        return sandbox


class KeepsNothing(LocalSandboxProvider):
    """Local sandboxes that claim to keep services but kill every process and list none."""

    name = "keeps-nothing"

    def create(self, spec):
        sandbox = super().create(spec)
        kill = sandbox.kill_processes

        async def kill_processes(*, timeout=10.0, keep_listening=False):
            await kill(timeout=timeout)
            return []

        sandbox.kill_processes = kill_processes
        return sandbox


async def test_every_family_is_in_the_kit():
    assert set(GRADER_CHECKS) == {"added_tools_survive", "added_test_tooling", "shadowed_shell", "startup_hooks",
                                  "reward_prefill", "kept_services", "kept_service_write", "set_network",
                                  "install_config"}
    assert set(GRADER_CHECKS) <= set(ALL_CHECKS)


class KeepsTheAgentsTooling(LocalSandboxProvider):
    """Local sandboxes whose restore leaves the test tooling the agent installed."""

    name = "keeps-the-agents-tooling"

    def create(self, spec):
        sandbox = super().create(spec)

        async def restore_image_tools(keep=None):
            return []

        sandbox.restore_image_tools = restore_image_tools
        return sandbox


async def test_test_tooling_left_for_the_grader_is_caught_and_local_removes_it():
    results = await only(KeepsTheAgentsTooling(), "added_test_tooling")
    assert not results["added_test_tooling"].passed and not results["added_test_tooling"].skipped
    assert "pytest-8.4.1.dist-info" in results["added_test_tooling"].message
    assert (await only(LocalSandboxProvider(), "added_test_tooling"))["added_test_tooling"].passed


async def test_a_grader_that_inherits_pythonpath_is_caught():
    results = await only(LeaksTheEnvironment(), "startup_hooks")
    assert not results["startup_hooks"].passed and not results["startup_hooks"].skipped
    assert "HOOKED-sitecustomize" in results["startup_hooks"].message


async def test_a_sandbox_that_drops_the_service_it_claims_to_keep_is_caught():
    results = await only(KeepsNothing(), "kept_services")
    assert not results["kept_services"].passed and "did not report the service" in results["kept_services"].message


async def test_what_local_cannot_do_is_skipped_with_the_reason():
    results = await only(LocalSandboxProvider(), "added_tools_survive")  # its /usr is the host's, read-only
    assert results["added_tools_survive"].skipped and "can install nothing" in results["added_tools_survive"].message
