"""Fixtures for the terminus tests: real sandboxes (local bubblewrap, Docker) and reply builders."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid

import pytest

from tackroom import SandboxSpec
from tackroom.testing import skip_or_fail
from tackroom_local import LocalSandboxProvider


def make_turn(*commands: str | tuple[str, float], complete: bool = False, analysis: str = "", plan: str = "") -> str:
    """A valid Terminus reply typing ``commands`` (text, or (text, duration))."""
    cmds = [{"keystrokes": c, "duration": 0.2} if isinstance(c, str) else {"keystrokes": c[0], "duration": c[1]}
            for c in commands]
    return json.dumps({"analysis": analysis, "plan": plan, "commands": cmds, "task_complete": complete})


@pytest.fixture
def turn():
    """``turn("ls\\n", ("sleep 1\\n", 1.5), complete=True)``: a valid reply as the model would write it."""
    return make_turn


@pytest.fixture
def local_provider() -> LocalSandboxProvider:
    return LocalSandboxProvider()


@pytest.fixture
async def local_sandbox(local_provider):
    sandbox = local_provider.create(SandboxSpec(name=f"terminus-{uuid.uuid4().hex[:8]}"))
    await sandbox.start()
    try:
        yield sandbox
    finally:
        await sandbox.stop()


def _docker_problem() -> str | None:
    try:
        out = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=20)
    except FileNotFoundError:
        return "the docker CLI is not installed"
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer within 20 s"
    return None if out.returncode == 0 else f"the Docker engine is unreachable: {out.stderr.strip()[:200]}"


@pytest.fixture(scope="session")
def docker_provider():
    """The docker sandbox on the offline base image (bootstrapped when missing); skips without an engine, fails under CI."""
    problem = _docker_problem()
    if problem:
        skip_or_fail(problem)
    from tackroom_docker import DockerProvider
    from tackroom_docker.base_images import bootstrap

    asyncio.run(bootstrap("debian:bookworm-slim"))
    return DockerProvider()
