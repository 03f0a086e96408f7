"""A world's files in any harness's sandbox: ``world.toml``'s ``[files]`` (``source`` folder, ``mount`` path) read
the same way for every harness, and uploaded before the agent starts, so a task's data lives once, in its world."""

from __future__ import annotations

import os
import shlex
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from tackroom import Sandbox, Task, TaskError
from tackroom_worlds.task_tables import sandbox_path, task_world, task_world_dir

WORLD_FILE = "world.toml"


class FilesSpec(BaseModel):
    """``[files]`` of world.toml: the world's files and where they land in the sandbox."""

    model_config = ConfigDict(extra="forbid")

    source: str = "files"
    mount: str = "/workspace"

    @field_validator("mount")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if isinstance(v, str) and "," in v:
            # An agent's list of readable folders is comma-joined (the Gemini CLI's --include-directories): a comma
            # in a task's mount would add a folder of the task's choosing.
            raise ValueError(f"files.mount must be one folder, without commas, got {v!r}")
        return sandbox_path(v, "files.mount")


class WorldFiles(BaseModel):
    """Where a world's files are on the host and where they go in the sandbox."""

    source: Path
    mount: str


def world_files(world_dir: Path) -> WorldFiles:
    """Read ``[files]`` of ``<world_dir>/world.toml``; :class:`TaskError` naming the file and the fix when the file,
    the table or the folder is wrong, or when a link in the folder points outside it (it would upload a host file)."""
    file = Path(world_dir) / WORLD_FILE
    try:
        raw = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise TaskError(f"{file}: missing; a world directory needs a world.toml (see docs/worlds.md)") from exc
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"{file}: invalid TOML: {exc}") from exc
    try:
        spec = FilesSpec.model_validate(raw.get("files", {}))
    except ValidationError as exc:
        problems = "; ".join(f"files.{'.'.join(map(str, e['loc']))}: "
                             f"{'unknown field' if e['type'] == 'extra_forbidden' else e['msg']}" for e in exc.errors())
        raise TaskError(f"{file}: {problems} (valid fields of [files]: source, mount)") from exc
    root = Path(world_dir).resolve()
    source = (root / spec.source).resolve()
    if not source.is_relative_to(root) or not source.is_dir():
        raise TaskError(f"{file}: files.source {spec.source!r} is not a folder inside the world {root}")
    for folder, dirs, names in os.walk(source):
        for name in (*dirs, *names):
            link = Path(folder, name)
            if link.is_symlink() and not link.resolve().is_relative_to(source):
                raise TaskError(f"{link}: a symbolic link that points outside the world's files; copy the file in")
    return WorldFiles(source=source, mount=spec.mount)


def _files_to_mount(task: Task) -> tuple[Path, WorldFiles] | None:
    """The task's world directory and its ``[files]``, or ``None`` for a task without a world (or one that turned
    mounting off: ``[world] mount_files = false``)."""
    table = task_world(task)
    world_dir = task_world_dir(task)
    if table is None or world_dir is None or not table.mount_files:
        return None
    return world_dir, world_files(world_dir)


def world_mount(task: Task) -> str | None:
    """Where :func:`mount_world_files` puts the task's world files (``[files] mount``), or ``None`` for a task without
    a world (or one that turned mounting off): a path outside the working directory that an agent confined to its
    workspace (the Gemini CLI) must be allowed to read."""
    found = _files_to_mount(task)
    return found[1].mount if found is not None else None


async def mount_world_files(sandbox: Sandbox, task: Task, *, timeout: float = 300.0) -> str | None:
    """Upload the task's world files to their mount (``[world] mount_files``, default on); a note saying what was
    mounted, or ``None`` for a task without a world (or one that turned mounting off)."""
    found = _files_to_mount(task)
    if found is None:
        return None
    world_dir, files = found
    made = await sandbox.exec(f"mkdir -p {shlex.quote(files.mount)}", timeout=60)
    if not made.ok:
        raise TaskError(f"could not create the world's mount {files.mount} in the sandbox: "
                        f"{(made.stderr or made.stdout).strip()[:300]}")
    await sandbox.upload(files.source, files.mount, timeout=timeout)
    return f"world files of {world_dir.name!r} mounted at {files.mount}"
