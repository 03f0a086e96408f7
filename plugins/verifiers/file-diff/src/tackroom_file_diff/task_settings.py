"""What a task says about its file outputs: the ``expected/`` directory, ``expected_outputs`` and the ``[file_diff]`` table.

Layout of a task graded by file-diff::

    my-task/
      instruction.md
      task.toml            # optional expected_outputs = ["/app/out.csv"] and [file_diff] table (FileDiffTaskSettings)
      expected/            # mirrors absolute sandbox paths
        app/out.csv        # the expected content of /app/out.csv
        app/report.docx    # ... of /app/report.docx

Every file under ``expected/`` is an output the agent must produce; its path
below ``expected/`` is its absolute path in the sandbox.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

import tackroom
from tackroom_file_diff.formats import FileFormat
from tackroom_file_diff.tolerance import ToleranceRules

ToleranceOverride: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "ToleranceOverride",
    __config__=ConfigDict(extra="forbid"),
    __doc__="Some of :class:`ToleranceRules`' fields; the ones set replace the layer below.",
    **{name: (field.annotation | None, None) for name, field in ToleranceRules.model_fields.items()},
)


class FileDiffTaskSettings(BaseModel):
    """The ``[file_diff]`` table of a task.toml::

        [file_diff]
        tolerance = { abs_tol = 0.01 }             # for every file of this task
        must_not_exist = ["/app/scratch.txt"]      # outputs the agent must remove / not create
        weights = { "/app/out.csv" = 2.0 }         # share of each file in the mean (default 1)

        [file_diff.formats.docx]                   # for every docx of this task
        ignore_case = true

        [file_diff.files."/app/out.xlsx"]          # for one file
        compare = "both"
    """

    model_config = ConfigDict(extra="forbid")

    expected_dir: str | None = Field(default=None, description="Overrides the verifier's expected_dir for this task")
    tolerance: ToleranceOverride | None = None  # type: ignore[valid-type]
    formats: dict[FileFormat, ToleranceOverride] = Field(default_factory=dict)  # type: ignore[valid-type]
    files: dict[str, ToleranceOverride] = Field(default_factory=dict)  # type: ignore[valid-type]
    weights: dict[str, float] = Field(default_factory=dict)
    must_not_exist: list[str] = Field(default_factory=list)


PLUGIN = "file-diff"


def expected_outputs(task: tackroom.Task) -> list[str]:
    """The task's ``expected_outputs``: sandbox paths the agent is expected to write (empty when it lists none);
    :class:`tackroom.TaskError` when it is not a list of strings."""
    return task.section("expected_outputs", list[str], owner=PLUGIN) or []


def task_settings(task: tackroom.Task) -> FileDiffTaskSettings:
    """The task's ``[file_diff]`` table; raises :class:`tackroom.TaskError` naming the bad field."""
    raw: Any = task.config.tables.get("file_diff", {})
    try:
        settings = FileDiffTaskSettings.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"file_diff.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise tackroom.TaskError(f"{task.path / 'task.toml'}: {problems}") from exc
    for path in [*settings.files, *settings.weights, *settings.must_not_exist]:
        if not path.startswith("/"):
            raise tackroom.TaskError(f"{task.path / 'task.toml'}: file_diff path {path!r} must be an absolute sandbox path")
    return settings


def expected_files(task: tackroom.Task, expected_dir: str) -> dict[str, Path]:
    """Sandbox path → local expected file, from ``<task>/<expected_dir>/`` (empty when there is none)."""
    root = (task.path / expected_dir).resolve()
    if not root.is_dir():
        return {}
    found: dict[str, Path] = {}
    for file in sorted(root.rglob("*")):
        if file.is_file():
            sandbox_path = "/" + posixpath.join(*file.relative_to(root).parts)
            found[sandbox_path] = file
    return found


def rules_for(path: str, fmt: FileFormat, base: ToleranceRules, option_formats: dict[FileFormat, BaseModel],
              settings: FileDiffTaskSettings) -> ToleranceRules:
    """Layer the rules: verifier options → its per-format rules → the task's → the task's per-format → per-file."""
    return base.merged(option_formats.get(fmt), settings.tolerance, settings.formats.get(fmt), settings.files.get(path))
