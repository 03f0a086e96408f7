"""``[rubric_judge]`` in task.toml: sandbox folders the judge sees the changes of, and their state before the agent.

A world task's files reach the sandbox in the harness's setup, after this verifier's ``prepare``: a snapshot
taken then would report every world file as added. ``baseline`` names, per sandbox path, the task folder that
holds its state as the task gives it (an imported Mercor task's snapshot, ``world/files``), so the judge sees
the snapshot diff Mercor's graders see::

    [rubric_judge]
    files = ["/filesystem"]
    baseline = { "/filesystem" = "world/files" }
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

import tackroom
from tackroom_file_diff import Snapshot, SnapshotFile

TABLE = "rubric_judge"


class RubricJudgeTaskSettings(BaseModel):
    """The task's ``[rubric_judge]`` table."""

    model_config = ConfigDict(extra="forbid")

    files: list[str] = Field(default_factory=list, description="Sandbox paths whose changes the judge sees")
    baseline: dict[str, str] = Field(default_factory=dict,
                                     description="Sandbox path -> task folder holding its state before the agent ran")


def task_settings(task: tackroom.Task) -> RubricJudgeTaskSettings:
    """The task's ``[rubric_judge]`` table (empty when it has none); :class:`tackroom.TaskError` naming the field."""
    raw = task.config.tables.get(TABLE, {})
    try:
        settings = RubricJudgeTaskSettings.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{TABLE}.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise tackroom.TaskError(f"{task.path / 'task.toml'}: {problems}") from exc
    where = task.path / "task.toml"
    root = task.path.resolve()
    for path in [*settings.files, *settings.baseline]:
        if not path.startswith("/"):
            raise tackroom.TaskError(f"{where}: {TABLE} path {path!r} must be an absolute sandbox path")
    for path, folder in settings.baseline.items():
        local = (root / folder).resolve()
        if not local.is_relative_to(root) or not local.is_dir():
            raise tackroom.TaskError(f"{where}: {TABLE}.baseline {path!r} = {folder!r} is not a folder in the task")
    return settings


def baseline_snapshot(task: tackroom.Task, settings: RubricJudgeTaskSettings, *, max_file_bytes: int) -> Snapshot:
    """The baseline folders read as if they sat at their sandbox paths (links are skipped, never followed)."""
    snap = Snapshot(paths=sorted(settings.baseline))
    for path, folder in settings.baseline.items():
        local = (task.path / folder).resolve()
        for dirpath, dirnames, filenames in os.walk(local):
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
            for name in filenames:
                file = Path(dirpath) / name
                if file.is_symlink() or not file.is_file():
                    continue
                target = path.rstrip("/") + "/" + file.relative_to(local).as_posix()
                data = file.read_bytes()
                digest = hashlib.sha256(data).hexdigest()
                snap.files[target] = SnapshotFile(path=target, size=len(data), sha256=digest,
                                                  data=data if len(data) <= max_file_bytes else None)
    return snap


__all__ = ["RubricJudgeTaskSettings", "baseline_snapshot", "task_settings"]
