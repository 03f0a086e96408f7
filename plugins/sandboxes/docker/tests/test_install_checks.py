"""The kit's ``install_config`` check (tackroom.testing.install_checks) on the docker sandbox: it holds on the
offline base image (apt, pytest's files at /) and on python:3.13-slim-bookworm (pip too), and fails on docker with
the defence taken out (the grader's environment without tackroom_sandbox_kit.install_env, restore without the
package managers' files)."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from tackroom import SandboxSpec
from tackroom.testing import SANDBOX_CHECKS, run_sandbox_checks, skip_or_fail
from tackroom_docker import grading as docker_grading
from tackroom_docker import tools as docker_tools

PYTHON_IMAGE = "python:3.13-slim-bookworm"
SKIP = set(SANDBOX_CHECKS) - {"install_config"}


def python_spec() -> SandboxSpec:
    found = subprocess.run(["docker", "image", "inspect", PYTHON_IMAGE, "--format", "ok"], capture_output=True, timeout=30)
    if found.returncode != 0:
        skip_or_fail(f"no {PYTHON_IMAGE} image (bash /work/shared/tools/tb2-python-base.sh builds it)")
    return SandboxSpec(name=f"test-{uuid.uuid4().hex[:8]}", image=PYTHON_IMAGE)


def install_result(report):
    (result,) = [r for r in report.results if r.name == "install_config"]
    return result


@pytest.mark.docker
@pytest.mark.parametrize("image", ["base", "python"])
async def test_docker_holds_against_planted_package_manager_configuration(provider, spec, image):
    report = await run_sandbox_checks(provider, spec if image == "base" else python_spec(), skip=SKIP)
    result = install_result(report)
    assert (result.passed, result.message) == (True, ""), result


@pytest.mark.docker
async def test_the_check_fails_on_docker_without_the_defence(provider, monkeypatch):
    monkeypatch.setattr(docker_grading, "install_env", lambda image_env, **kw: {})
    monkeypatch.setattr(docker_tools, "INSTALL_CONFIGS", ())
    monkeypatch.setattr(docker_tools, "REMOVE_SHADOWS", docker_tools.REMOVE_SHADOWS.replace(
        "|" + "|".join(docker_tools.INSTALL_CONFIGS), ""))
    result = install_result(await run_sandbox_checks(provider, python_spec(), skip=SKIP))
    assert not result.passed and not result.skipped, result
    for leak in ("pip (in a venv)", "pip: ", "apt-config", "apt sources", "pytest: /pytest.ini"):
        assert leak in result.message, (leak, result.message)
