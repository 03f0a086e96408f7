"""Fixtures shared by the trainer's tests."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tackroom.testing import skip_or_fail


@pytest.fixture
def free_port() -> int:
    """A port the OS hands out, for an engine a test starts: never "the first free one from 8012", which two
    tests running in parallel (the overfit run's engine, the merged policy's, the engine-sampling test's)
    picked at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# One SkyRL Tinker server (JAX) for the tests that only need *a* server and make their own LoRA on it
# (test_engine_sampling, test_tinker_policy): starting one costs minutes of this 2-core machine's CPU (imports,
# the model, XLA compiles). Every test makes its own training client (its own fresh LoRA); the server has slots
# for four. Both tests are in the `trainer` xdist group (root conftest.py), so they meet on one worker.
# Runs that start their own server (`run_tinker`: the overfit test) still do: that start is part of their claim.
SHARED_BACKEND = {"max_lora_adapters": 4, "max_lora_rank": 8, "train_micro_batch_size": 2}


@dataclass(frozen=True)
class SharedTinker:
    url: str
    base: Path
    state_dir: Path
    start_s: float

    @property
    def checkpoints(self) -> Path:
        return self.state_dir / "checkpoints"


# The server lives from the first test that asks for it until the last one is done, not to the end of the session:
# its tests run one after another (below) and the worker goes on to other groups with 3-7 GB less held, and the
# server's CPU is charged to the test that stops it. `pytest_sessionfinish` stops it after an interrupted run too.
_running: dict[str, tuple[Any, SharedTinker]] = {}


@pytest.fixture
def shared_tinker(tmp_path_factory: pytest.TempPathFactory) -> SharedTinker:
    if "server" in _running:
        return _running["server"][1]
    from tackroom_engine import model_dir
    from tackroom_train.tinker.server import TinkerServer, TinkerSettings, server_dir

    base = model_dir()
    if not (base / "config.json").is_file():
        skip_or_fail("SmolLM2 is not converted yet: run `tackroom model up` once")
    if not (server_dir() / ".venv").is_dir():
        skip_or_fail("the Tinker server's environment is not installed: `uv run python -m tackroom_train.tinker.server`")
    server = TinkerServer(TinkerSettings(lora_rank=8, backend_config=SHARED_BACKEND), str(base),
                          tmp_path_factory.mktemp("shared-tinker"))
    t0 = time.monotonic()
    try:
        url = server.start()
    except BaseException:
        server.stop()
        raise
    shared = SharedTinker(url=url, base=base, state_dir=server.state_dir, start_s=time.monotonic() - t0)
    _running["server"] = (server, shared)
    return shared


def _stop_shared() -> None:
    if "server" in _running:
        _running.pop("server")[0].stop()


@pytest.hookimpl(trylast=True)  # after the root conftest.py has put each xdist group's tests together
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The shared server's tests run one after another (at the first one's place, inside the `trainer` group)."""
    users = [item for item in items if "shared_tinker" in getattr(item, "fixturenames", ())]
    if users:
        first, ids = items.index(users[0]), {id(item) for item in users}
        rest = [item for item in items if id(item) not in ids]
        items[:] = rest[:first] + users + rest[first:]


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if nextitem is None or "shared_tinker" not in getattr(nextitem, "fixturenames", ()):
        _stop_shared()


def pytest_sessionfinish() -> None:
    _stop_shared()
