"""Harbor-compatible tasks: a directory with instruction.md, task.toml, environment/, tests/, solution/.

APEX-style world tasks add ``[world]`` (a reference to a shared world
directory) and a rubric (``rubric.toml`` / ``[[rubric]]`` in task.toml, or
``rubric.json``); they are read here so every plugin sees one ``Task``.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tackroom.errors import TaskError


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow")


class AgentSection(_Section):
    timeout_sec: float = 600.0


class VerifierSection(_Section):
    timeout_sec: float = 600.0
    env: dict[str, str] = Field(default_factory=dict)


class EnvironmentSection(_Section):
    """``[environment]``: image and resources. ``docker_image`` wins over ``environment/Dockerfile``."""

    docker_image: str | None = None
    build_timeout_sec: float = 600.0
    cpus: float = 1.0
    memory_mb: int = 2048
    storage_mb: int | None = None
    allow_internet: bool = False

    @field_validator("memory_mb", mode="before")
    @classmethod
    def _memory(cls, v: Any) -> Any:
        # Harbor also accepts strings like "2G" / "512M".
        if isinstance(v, str):
            s = v.strip().upper()
            scale = {"G": 1024, "M": 1, "K": 1 / 1024}
            if s and s[-1] in scale:
                return int(float(s[:-1]) * scale[s[-1]])
        return v


class MetadataSection(_Section):
    category: str | None = None
    domain: str | None = None
    difficulty: str | None = None
    tags: list[str] = Field(default_factory=list)


class RubricCriterion(BaseModel):
    """One gradable criterion; ``weight`` scales its share of the rubric score.

    A *penalty* criterion describes a mistake (``"The agent deleted the input
    file"``): when it holds, its weight is taken off the score. Mark one with
    ``penalty = true`` or a negative ``weight``.
    """

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    criterion: str
    weight: float = 1.0
    penalty: bool = False

    @property
    def is_penalty(self) -> bool:
        return self.penalty or self.weight < 0


class WorldSection(_Section):
    """``[world]``: ``path`` to a world directory, relative to the task directory."""

    path: str


class TaskConfig(BaseModel):
    """The parsed ``task.toml``."""

    model_config = ConfigDict(extra="allow")

    version: str = "1.0"
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    metadata: MetadataSection = Field(default_factory=MetadataSection)
    world: WorldSection | None = None
    rubric: list[RubricCriterion] = Field(default_factory=list)
    expected_outputs: list[str] = Field(default_factory=list)
    """Sandbox paths the agent is expected to write (graded by file-output verifiers)."""


class Task(BaseModel):
    """A loaded task directory."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str
    path: Path
    instruction: str
    config: TaskConfig

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def dockerfile(self) -> Path | None:
        p = self.environment_dir / "Dockerfile"
        return p if p.is_file() else None

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.path / "solution"

    @property
    def world_dir(self) -> Path | None:
        if self.config.world is None:
            return None
        return (self.path / self.config.world.path).resolve()

    @property
    def category(self) -> str | None:
        return self.config.metadata.category or self.config.metadata.domain

    @property
    def domain(self) -> str | None:
        return self.config.metadata.domain or self.config.metadata.category


def load_task(path: str | Path) -> Task:
    """Load one task directory; raise :class:`TaskError` naming the file and the problem."""
    root = Path(path).resolve()
    if not root.is_dir():
        raise TaskError(f"{root}: not a task directory (it does not exist or is a file)")
    instruction_file = root / "instruction.md"
    if not instruction_file.is_file():
        raise TaskError(f"{instruction_file}: missing; every task needs its instruction in instruction.md")
    try:
        instruction = instruction_file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TaskError(f"{instruction_file}: not UTF-8 text ({exc})") from exc
    if not instruction.strip():
        raise TaskError(f"{instruction_file}: empty instruction")
    raw: dict[str, Any] = {}
    toml_file = root / "task.toml"
    if toml_file.is_file():
        try:
            raw = tomllib.loads(toml_file.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise TaskError(f"{toml_file}: invalid TOML: {exc}") from exc
    for extra_rubric in ("rubric.json",):
        f = root / extra_rubric
        if f.is_file() and "rubric" not in raw:
            try:
                raw["rubric"] = json.loads(f.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise TaskError(f"{f}: invalid JSON: {exc}") from exc
    try:
        config = TaskConfig.model_validate(raw)
    except ValidationError as exc:
        raise TaskError(f"{toml_file}: {_describe(exc)}") from exc
    task = Task(id=root.name, path=root, instruction=instruction, config=config)
    if task.world_dir is not None and not task.world_dir.is_dir():
        raise TaskError(f"{toml_file}: [world].path {config.world.path!r} does not exist ({task.world_dir})")
    return task


def _describe(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}" for err in exc.errors()
    )


class TaskLoadFailure(BaseModel):
    """A task directory that could not be loaded, with the reason."""

    path: Path
    message: str


class Dataset(BaseModel):
    """Loaded tasks plus the directories that failed to load (one bad task never stops the rest)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    tasks: list[Task]
    failures: list[TaskLoadFailure] = Field(default_factory=list)


def is_task_dir(path: Path) -> bool:
    return (path / "instruction.md").is_file() or (path / "task.toml").is_file()


def load_dataset(
    sources: list[str | Path] | str | Path,
    include: list[str] | None = None,
    exclude: list[str] | None = None,
) -> Dataset:
    """Load tasks from task directories and/or dataset directories (directories of tasks).

    ``include``/``exclude`` are shell-style patterns matched against task ids.
    A source that does not exist is an error of its own (a typo should not
    silently shrink a run).
    """
    from fnmatch import fnmatch

    if isinstance(sources, (str, Path)):
        sources = [sources]
    tasks: list[Task] = []
    failures: list[TaskLoadFailure] = []
    seen: set[Path] = set()
    for source in sources:
        src = Path(source).resolve()
        if not src.exists():
            raise TaskError(f"{src}: no such task or dataset directory")
        candidates = [src] if is_task_dir(src) else sorted(p for p in src.iterdir() if p.is_dir())
        if not candidates:
            raise TaskError(f"{src}: no task directories inside (a task has instruction.md and task.toml)")
        for cand in candidates:
            if cand in seen:
                continue
            seen.add(cand)
            tid = cand.name
            if include and not any(fnmatch(tid, pat) for pat in include):
                continue
            if exclude and any(fnmatch(tid, pat) for pat in exclude):
                continue
            try:
                tasks.append(load_task(cand))
            except TaskError as exc:
                failures.append(TaskLoadFailure(path=cand, message=str(exc)))
    return Dataset(tasks=tasks, failures=failures)
