"""Fixtures: rubric tasks written to disk, the misbehaving judge server, and the real local engine."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import tackroom
from tackroom_rubric_judge import close_shared_clients
from tackroom_rubric_judge.testing import MisbehavingJudgeServerForTests


def write_rubric_task(root: Path, rubric: list[dict], *, name: str = "rubric-task",
                      instruction: str = "Write the capital of France to /app/answer.txt and say what you did.",
                      extra_toml: str = "") -> Path:
    task = root / name
    task.mkdir(parents=True)
    (task / "instruction.md").write_text(instruction + "\n")
    (task / "task.toml").write_text('version = "1.0"\n' + extra_toml + "\n")
    (task / "rubric.json").write_text(json.dumps(rubric))
    return task


@pytest.fixture
def rubric_task(tmp_path) -> Callable[..., tackroom.Task]:
    """``rubric_task([{"criterion": ..., "weight": ...}, ...], **kw)`` → a loaded task."""

    def make(rubric: list[dict], **kw) -> tackroom.Task:
        return tackroom.load_task(write_rubric_task(tmp_path, rubric, **kw))

    return make


@pytest.fixture
def rubric_task_dir(tmp_path) -> Callable[..., Path]:
    """``rubric_task_dir(rubric, name=..., instruction=..., extra_toml=...)`` → the task directory (not loaded)."""

    def make(rubric: list[dict], **kw) -> Path:
        return write_rubric_task(tmp_path, rubric, **kw)

    return make


@pytest.fixture
def judge_server() -> Iterator[Callable[..., MisbehavingJudgeServerForTests]]:
    """``judge_server(script=[...], ...)`` → a started server; all are stopped after the test."""
    servers: list[MisbehavingJudgeServerForTests] = []

    def make(**kw) -> MisbehavingJudgeServerForTests:
        server = MisbehavingJudgeServerForTests(**kw).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture(autouse=True)
async def _fresh_judge_clients():
    """Each test gets its own shared clients (and their connections are closed after it)."""
    yield
    await close_shared_clients()


# engine_url comes from the repository's root conftest.py (TACKROOM_ENGINE_URL, else `tackroom model up`'s engine).
