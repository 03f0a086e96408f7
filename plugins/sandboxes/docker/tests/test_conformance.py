"""The docker sandbox passes tackroom's sandbox conformance suite, and the suite catches broken providers."""

from __future__ import annotations

import pytest

from tackroom import SandboxSpec
from tackroom.testing import check_registered, run_sandbox_checks, sandbox_self_check
from tackroom_docker import DockerProvider
from tackroom_docker.sandbox import DockerSandbox


def test_docker_is_registered_through_the_entry_point_group():
    cls = check_registered("sandbox", "docker", distribution="tackroom-docker")
    assert cls is DockerProvider
    assert {"dockerfile", "network", "expose"} <= cls.capabilities


@pytest.mark.docker
async def test_docker_sandbox_passes_the_self_check(provider):
    report = await sandbox_self_check(provider)
    assert {r.name for r in report.results} >= {"exec_timeout", "large_output", "path_traversal", "no_network"}
    isolation = {r.name: (r.passed, r.message) for r in report.results if r.name in
                 ("added_tools_survive", "shadowed_shell", "startup_hooks", "reward_prefill", "kept_services",
                                     "set_network")}
    assert isolation == dict.fromkeys(isolation, (True, "")) and len(isolation) == 6, isolation  # held, not skipped
    grading = {r.name: (r.passed, r.message) for r in report.results
               if r.name in ("planted_test_files", "fifo_at_read_path", "tampered_tools", "disk_fill")}
    assert grading == dict.fromkeys(grading, (True, "")) and len(grading) == 4, grading  # held, not skipped
    print("docker self-check timings:", {k: round(v, 3) for k, v in report.timings.items()})
    assert report.timings["stop_s"] < 2.0


class _NoTraversalCheck(DockerSandbox):
    """Deliberately broken for the test: accepts ``..`` in paths."""

    def _resolve(self, path: str) -> str:
        return path if path.startswith("/") else f"{self.workdir}/{path}"


class _ClientOnlyTimeout(DockerSandbox):
    """Deliberately broken for the test: a timeout kills the docker client but not the command."""

    async def _kill_marked(self, marker: str) -> None:
        return None


def _provider_making(sandbox_cls: type[DockerSandbox]) -> DockerProvider:
    class BrokenProvider(DockerProvider):
        def create(self, spec: SandboxSpec) -> DockerSandbox:
            return sandbox_cls(spec, self.options, self.cli)

    return BrokenProvider()


@pytest.mark.docker
async def test_self_check_reports_a_sandbox_that_lets_paths_escape(base_image):
    report = await run_sandbox_checks(_provider_making(_NoTraversalCheck), skip={"exec_timeout", "large_output", "snapshot",
                                                                                 "shadowed_shell"})
    failed = {r.name: r.message for r in report.failures}
    assert set(failed) == {"path_traversal"}, failed
    assert "must raise SandboxPathError" in failed["path_traversal"]
    with pytest.raises(AssertionError, match="path_traversal"):
        report.assert_ok()


@pytest.mark.docker
async def test_self_check_reports_a_timeout_that_leaves_the_command_running(base_image):
    skip = {"large_output", "binary_round_trip", "directory_transfer", "snapshot", "stop_idempotent", "shadowed_shell"}
    report = await run_sandbox_checks(_provider_making(_ClientOnlyTimeout), skip=skip)
    failed = {r.name: r.message for r in report.failures}
    assert set(failed) == {"exec_timeout"}, failed
    assert "still running" in failed["exec_timeout"]


@pytest.mark.docker
async def test_docker_binds_mounts_read_only(provider):
    """``SandboxSpec.mounts`` are read-only binds (``ReadOnlyMounts``): the kit's attack changes nothing on the host."""
    from tackroom.sandbox_features import ReadOnlyMounts
    from tackroom.testing import SANDBOX_CHECKS

    assert isinstance(provider.create(SandboxSpec(name="m")), ReadOnlyMounts)
    report = await run_sandbox_checks(provider, skip=set(SANDBOX_CHECKS) - {"readonly_mounts"})
    (result,) = [r for r in report.results if r.name == "readonly_mounts"]
    assert result.passed and not result.skipped, result.message
