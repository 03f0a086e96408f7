"""Docker tests run against the real engine. Without one they skip locally and FAIL under CI=true."""

from __future__ import annotations

import asyncio
import subprocess
import uuid

import pytest

from tackroom import SandboxSpec
from tackroom.testing import skip_or_fail
from tackroom_docker import DockerProvider
from tackroom_docker.base_images import bootstrap

BASE_IMAGE = "debian:bookworm-slim"


def _engine_problem() -> str | None:
    try:
        out = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=20)
    except FileNotFoundError:
        return "the docker CLI is not installed"
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer within 20 s"
    if out.returncode != 0:
        return f"the Docker engine is unreachable: {out.stderr.strip()[:200]}"
    return None


_problem: list[str | None] = []


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("docker") is None:
        return
    if not _problem:
        _problem.append(_engine_problem())
    if _problem[0] is not None:
        skip_or_fail(f"{_problem[0]} (start dockerd to run the docker tests; scripts/setup does)")


@pytest.fixture(scope="session")
def base_image() -> str:
    """The offline base image; bootstrapped here when scripts/setup has not done it yet."""
    asyncio.run(bootstrap(BASE_IMAGE))
    return BASE_IMAGE


@pytest.fixture
def provider(base_image: str) -> DockerProvider:
    return DockerProvider()


@pytest.fixture
def spec() -> SandboxSpec:
    return SandboxSpec(name=f"test-{uuid.uuid4().hex[:8]}")


def _containers(label: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={label}"], capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.split()


def _inspect(name: str, fmt: str) -> str:
    out = subprocess.run(["docker", "inspect", "--format", fmt, name], capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.strip()


@pytest.fixture
def containers():
    """``containers("key=value")``: IDs of containers, running or not, carrying that label."""
    return _containers


@pytest.fixture
def inspect():
    """``inspect(name, go_template)``: ``docker inspect --format`` of one container."""
    return _inspect
