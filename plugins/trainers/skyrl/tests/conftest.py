"""Fixtures shared by the trainer's tests."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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


@pytest.fixture(scope="session")
def shared_tinker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedTinker]:
    from tackroom_engine import model_dir
    from tackroom_skyrl.tinker.server import TinkerServer, TinkerSettings, server_dir

    base = model_dir()
    if not (base / "config.json").is_file():
        skip_or_fail("SmolLM2 is not converted yet: run `tackroom model up` once")
    if not (server_dir() / ".venv").is_dir():
        skip_or_fail("the Tinker server's environment is not installed: `uv run python -m tackroom_skyrl.tinker.server`")
    server = TinkerServer(TinkerSettings(lora_rank=8, backend_config=SHARED_BACKEND), str(base),
                          tmp_path_factory.mktemp("shared-tinker"))
    t0 = time.monotonic()
    try:
        url = server.start()
        yield SharedTinker(url=url, base=base, state_dir=server.state_dir, start_s=time.monotonic() - t0)
    finally:
        server.stop()
