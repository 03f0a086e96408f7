"""The task.toml tables every harness reads alike: ``[world]`` (which world, which of its tools, its files) and
``[answer]`` (where a harness that ends with a text answer writes it).

Core keeps these tables as written (:meth:`tackroom.Task.section`); this module owns their models, so a task
says once what it needs and the same task runs under any harness without editing the harness's options."""

from __future__ import annotations

import fnmatch
import posixpath
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tackroom import Task, TaskError

OWNER = "tackroom-worlds"
M = TypeVar("M", bound=BaseModel)


def sandbox_path(value: str, what: str) -> str:
    """An absolute sandbox path without ``..`` (normalised), else :class:`ValueError` naming ``what``."""
    if not isinstance(value, str) or not value.startswith("/") or ".." in value.split("/"):
        raise ValueError(f"{what} must be an absolute sandbox path without '..', got {value!r}")
    return posixpath.normpath(value)


class WorldTable(BaseModel):
    """``[world]``: the world a task uses, the tools of it that the task offers, and whether its files are mounted."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="The world directory, relative to the task directory")
    tools_include: list[str] | None = Field(
        default=None, min_length=1, description="Globs over the world's tool names (<server>_<tool>): only these are offered; "
                                  "replaces the harness's own tools_include for this task")
    tools_exclude: list[str] | None = Field(default=None, description="Globs of tools not offered")
    mount_files: bool = Field(
        default=True, description="Put the world's files at its [files] mount for every harness (terminus and "
                                  "opencode read them with the shell; archipelago's servers serve them)")
    system_prompt: str | None = Field(
        default=None, description="The task's own system message (an imported Mercor task's), instead of the "
                                  "harness's system_prompt (archipelago)")


class AnswerTable(BaseModel):
    """``[answer]``: where a harness that ends with a text answer (answer, archipelago) writes it for the verifier."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="Absolute sandbox file, e.g. /app/answer.txt")

    @field_validator("path")
    @classmethod
    def _absolute(cls, v: str) -> str:
        return sandbox_path(v, "[answer] path")


def read_table(task: Task, name: str, model: type[M]) -> M | None:
    """Table ``name`` of ``task`` validated with ``model``; ``None`` when absent. Unknown keys are refused with
    the list of the keys that exist (a typo such as ``tool_include`` must not silently offer every tool)."""
    raw: Any = task.config.tables.get(name)
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise TaskError(f"{task.path / 'task.toml'}: [{name}] must be a table, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(model.model_fields))
    if unknown:
        raise TaskError(f"{task.path / 'task.toml'}: [{name}] has unknown field(s) {', '.join(unknown)}; "
                        f"valid fields: {', '.join(model.model_fields)} (the table is read by {OWNER} for every harness)")
    return task.section(name, model, owner=OWNER)


def task_world(task: Task) -> WorldTable | None:
    """The task's ``[world]`` table, or ``None``."""
    return read_table(task, "world", WorldTable)


def task_world_dir(task: Task) -> Path | None:
    """The world directory a task names in ``[world]`` (resolved), ``None`` when it names none;
    :class:`TaskError` when the table is malformed or the directory does not exist."""
    table = task_world(task)
    if table is None:
        return None
    world_dir = (task.path / table.path).resolve()
    if not world_dir.is_dir():
        raise TaskError(f"{task.path / 'task.toml'}: [world].path {table.path!r} does not exist ({world_dir})")
    return world_dir


def task_answer_path(task: Task, default: str | None) -> str | None:
    """Where the task wants the text answer: its ``[answer] path``, else the harness's ``default``."""
    table = read_table(task, "answer", AnswerTable)
    return table.path if table is not None else default


def check_tool_globs(task: Task, table: WorldTable | None, tools: list[str]) -> None:
    """Refuse a ``[world] tools_include`` glob that matches none of the world's ``tools`` (a typo would otherwise
    offer fewer tools than the task was written for), naming the tools that exist."""
    if table is None or not table.tools_include:
        return
    unmatched = [g for g in table.tools_include if not any(fnmatch.fnmatch(name, g) for name in tools)]
    if unmatched:
        raise TaskError(f"{task.path / 'task.toml'}: [world] tools_include {unmatched} match(es) none of the world's "
                        f"tools; they are: {', '.join(sorted(tools)) or '(none)'}")
