"""Fixtures shared by the trainer's tests."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture
def free_port() -> int:
    """A port the OS hands out, for an engine a test starts: never "the first free one from 8012", which two
    tests running in parallel (the overfit run's engine, the merged policy's, the engine-sampling test's)
    picked at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
