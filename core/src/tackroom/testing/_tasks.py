"""Tasks for tests: a Harbor-style task directory on disk, or a Task in memory."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tackroom._task import AgentSection, Task, TaskConfig


def write_task(root: Path, name: str = "task", *, instruction: str = "Do the task.", test_sh: str | None = None,
               solve_sh: str | None = None, toml: str | None = None, agent_timeout_sec: float = 60.0,
               verifier_timeout_sec: float = 30.0, files: Mapping[str, str | bytes] | None = None) -> Path:
    """Write a Harbor-style task directory ``root/name`` and return it (``load_task`` it for a Task).

    It holds ``instruction.md``; ``task.toml`` (``toml`` as given, else just the agent and verifier
    timeouts); ``tests/test.sh`` and ``solution/solve.sh`` when given; and ``files``, any other file by its
    path inside the task (``{"expected/app/out.txt": "ok\\n"}``).
    """
    task = root / name
    task.mkdir(parents=True, exist_ok=True)
    if toml is None:
        toml = f"[agent]\ntimeout_sec = {agent_timeout_sec}\n[verifier]\ntimeout_sec = {verifier_timeout_sec}\n"
    written = {"instruction.md": instruction, "task.toml": toml, "tests/test.sh": test_sh,
               "solution/solve.sh": solve_sh, **(files or {})}
    for path, content in written.items():
        if content is None:
            continue
        (task / path).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (task / path).write_bytes(content)
        else:
            (task / path).write_text(content)
    return task


def task_for_tests(instruction: str, *, agent_timeout_sec: float = 60.0, path: Path | None = None) -> Task:
    """A :class:`~tackroom.Task` made in memory, for calling ``Harness.run`` directly in a test (no files: a
    harness that reads the task's folder needs :func:`write_task` and ``load_task``)."""
    return Task(id="task-for-tests", path=path or Path("/nonexistent/task-for-tests"), instruction=instruction,
                config=TaskConfig(agent=AgentSection(timeout_sec=agent_timeout_sec)))
