"""The kit's ``install_config`` check (tackroom.testing.install_checks) passes on the real ``local`` sandbox and
fails on it with the defence taken out (the grader's environment without tackroom_sandbox_kit.install_env)."""

from __future__ import annotations

import shutil

from tackroom.testing import SANDBOX_CHECKS, run_sandbox_checks
from tackroom_local import LocalSandboxProvider
from tackroom_local import grading as local_grading


def only_install_config() -> set[str]:
    return set(SANDBOX_CHECKS) - {"install_config"}


async def test_the_local_sandbox_holds_against_planted_package_manager_configuration(tmp_path):
    report = await run_sandbox_checks(LocalSandboxProvider({"root_dir": str(tmp_path)}), skip=only_install_config())
    (result,) = [r for r in report.results if r.name == "install_config"]
    assert (result.passed, result.message) == (True, ""), result


async def test_the_check_fails_when_the_graders_package_managers_discover_the_agents_files(tmp_path, monkeypatch):
    # The host's python3 has pip (the check asks it inside a virtualenv folder the agent prepared); without it the
    # check would have nothing to catch here.
    assert shutil.which("python3"), "no python3 on this host"
    monkeypatch.setattr(local_grading, "install_env", lambda image_env, **kw: {})
    report = await run_sandbox_checks(LocalSandboxProvider({"root_dir": str(tmp_path)}), skip=only_install_config())
    (result,) = [r for r in report.results if r.name == "install_config"]
    assert not result.passed and not result.skipped, result
    assert "pip (in a venv)" in result.message and "agent.invalid" in result.message, result.message
