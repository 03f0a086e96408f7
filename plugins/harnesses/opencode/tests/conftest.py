"""Fixtures for the opencode harness tests: the real OpenCode install, the real SmolLM2 tokenizer, tasks."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from tackroom import testing

sys.path.insert(0, str(Path(__file__).parent))  # opencode_tasks.py (tests use --import-mode=importlib)



@pytest.fixture(scope="session")
def opencode_install():
    """The pinned OpenCode from npm, in the host cache (installed on first use)."""
    from tackroom_opencode.install import ensure_installed

    return asyncio.run(ensure_installed())


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    from tackroom_gateway import load_tokenizer

    return load_tokenizer("smollm2")


@pytest.fixture(scope="session")
def docker_ready() -> None:
    """Skip (locally) or fail (under CI) when no Docker engine answers; bootstrap the offline base image."""
    try:
        out = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=20)
        problem = None if out.returncode == 0 else f"the Docker engine is unreachable: {out.stderr.strip()[:200]}"
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        problem = f"no Docker engine ({exc})"
    if problem:
        testing.skip_or_fail(problem)
    from tackroom_docker.base_images import bootstrap

    asyncio.run(bootstrap("debian:bookworm-slim"))
