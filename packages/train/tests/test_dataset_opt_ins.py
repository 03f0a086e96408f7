"""`tackroom train` warns about a task that grades what its kept services write (a reward a policy can steer)."""

from __future__ import annotations

import logging

import pytest

from tackroom import ConfigError
from tackroom_train.dataset import prompt_rows


def make_task(root, name: str, verifier: str = ""):
    task = root / name
    (task / "tests").mkdir(parents=True)
    (task / "instruction.md").write_text("serve the answer on port 8000")
    (task / "task.toml").write_text("[verifier]\ntimeout_sec = 30\n" + verifier)
    (task / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")


def test_a_task_that_grades_its_services_writes_is_named_in_a_warning(tmp_path, caplog):
    make_task(tmp_path, "steerable", "grade_service_writes = true\n")
    make_task(tmp_path, "plain")
    with caplog.at_level(logging.WARNING, logger="tackroom_train.dataset"):
        rows = prompt_rows([str(tmp_path)])
    assert len(rows) == 2
    warned = [r.getMessage() for r in caplog.records if "grade_service_writes" in r.getMessage()]
    assert len(warned) == 1 and "steerable" in warned[0] and "plain" not in warned[0], warned


def test_a_task_the_sandbox_cannot_run_is_left_out_and_named(tmp_path, caplog):
    """As `tackroom run` and the matrix refuse it before the run: a task error named up front, not a masked rollout."""
    from tackroom_local import LocalSandboxProvider

    make_task(tmp_path, "plain")
    make_task(tmp_path, "unreadable")
    (tmp_path / "unreadable" / "environment").mkdir()
    (tmp_path / "unreadable" / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nRUN echo \\\n")
    with caplog.at_level(logging.WARNING, logger="tackroom_train.dataset"):
        rows = prompt_rows([str(tmp_path)], sandbox=LocalSandboxProvider())
    assert [r["task_id"] for r in rows] == ["plain"]
    (warned,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("not training on")]
    assert "unreadable" in warned and "line continuation" in warned, warned
    with pytest.raises(ConfigError, match="no loadable task .*line continuation"):
        prompt_rows([str(tmp_path)], include=["unreadable"], sandbox=LocalSandboxProvider())
