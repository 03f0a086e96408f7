"""Harbor-compatible tasks: a directory with instruction.md, task.toml, environment/, tests/, solution/.

Core reads ``[agent]``, ``[verifier]``, ``[environment]`` and ``[metadata]``; every other table is kept as
written and read by the plugin that owns it, with its own model (:meth:`Task.section`). One exception: a world
task's ``[world] path`` lies outside the task and :func:`task_source_hash` covers it (a missing world is refused).
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import stat
import time
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from tackroom._config import NetworkDefaults, finite_positive, format_validation_error
from tackroom._errors import TaskError
from tackroom._sandbox import NetworkPolicy, SandboxProvider

log = logging.getLogger("tackroom")
MAX_TIMEOUT_SEC = 7 * 24 * 3600.0
"""No phase of a trial may be given longer than a week: a larger value is a typo or a task that would stall a run."""


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"must be a number, not {str(value).lower()}")
    return value


def _seconds(value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"must be a positive, finite number of seconds, got {value!r}")
    if value > MAX_TIMEOUT_SEC:
        raise ValueError(f"must be at most {MAX_TIMEOUT_SEC:g} seconds (7 days), got {value!r}")
    return value


Seconds = Annotated[float, BeforeValidator(_not_bool), AfterValidator(_seconds)]
"""A timeout: positive, finite, at most :data:`MAX_TIMEOUT_SEC` (0, -5, nan and inf are rejected)."""
PositiveFloat = Annotated[float, BeforeValidator(_not_bool), AfterValidator(finite_positive)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow")


def _size_mb(value: Any) -> Any:
    """Harbor's sizes: ``"2G"``, ``"512M"``, ``"1024K"`` (also ``"2GB"``, ``"2Gi"``) or a number of MB."""
    if not isinstance(value, str):
        return value
    text = value.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"T": 1024 * 1024, "G": 1024, "M": 1, "K": 1 / 1024}.get(text[-1:], None)
    try:
        number = float(text[:-1] if scale else text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"must be a positive size like 2048, \"2G\" or \"512M\", got {value!r}")
    return max(int(number * (scale or 1)), 1)


SizeMb = Annotated[int, BeforeValidator(_size_mb), BeforeValidator(_not_bool), AfterValidator(finite_positive)]
NetworkModeKey = Literal["none", "no-network", "public", "allowlist"]


class _PhaseNetwork(_Section):
    """Harbor's per-phase network keys (``[agent]`` / ``[verifier]`` / ``[environment]``): ``network_mode`` and
    ``allowed_hosts`` (which alone means ``allowlist``)."""

    network_mode: NetworkModeKey | None = None
    allowed_hosts: list[str] = Field(default_factory=list)

    def declared_network(self) -> NetworkPolicy | None:
        """The policy these keys declare, or ``None`` when they declare none."""
        if self.network_mode is None and not self.allowed_hosts:
            return None
        return NetworkPolicy(mode=self.network_mode or "allowlist", allowed_hosts=self.allowed_hosts)

    @model_validator(mode="after")
    def _valid_network(self) -> _PhaseNetwork:
        self.declared_network()  # a mode and hosts that do not go together fail here, at load
        return self


class AgentSection(_PhaseNetwork):
    timeout_sec: Seconds = 600.0


class VerifierSection(_PhaseNetwork):
    timeout_sec: Seconds = 600.0
    env: dict[str, str] = Field(default_factory=dict)
    reward_range: tuple[float, float] = (0.0, 1.0)
    """The range every reward and named sub-score must fall in; anything outside (or not finite) is a task error."""
    grading: Literal["shared", "separate"] = "shared"
    """Where grading runs. ``shared``: in the agent's sandbox once its processes are killed, the image's tools
    restored where the sandbox can (for tests that need state outside ``grading_paths``, a database it filled).
    ``separate``: in a fresh sandbox of the same image holding only a copy of ``grading_paths`` and the working
    directory; nothing else the agent changed reaches the grader, at the cost of a second start."""
    grading_paths: list[str] = Field(default_factory=list)
    """Absolute sandbox paths the grader reads besides the working directory: checked for planted FIFOs and
    devices before grading, and what ``grading = "separate"`` copies (with the working directory)."""
    keep_services: bool = True
    """Processes the agent left listening (a server its solution started) stay, frozen, into grading and run only
    while test.sh does, as Harbor grades the live environment, reading graded paths from a copy taken while
    they were frozen; ``false``: every agent process is killed first."""
    grade_service_writes: bool = False
    """What kept services write to graded paths while test.sh runs is graded (steerable; docs/threat-model.md)."""

    @field_validator("grading_paths")
    @classmethod
    def _absolute(cls, v: list[str]) -> list[str]:
        for path in v:
            if not path.startswith("/") or ".." in path.split("/"):
                raise ValueError(f"grading_paths must be absolute paths without '..', got {path!r}")
        return v

    @field_validator("reward_range")
    @classmethod
    def _range(cls, v: tuple[float, float]) -> tuple[float, float]:
        lo, hi = v
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"reward_range must be two finite numbers [low, high] with low < high, got {list(v)}")
        return v


class EnvironmentSection(_PhaseNetwork):
    """``[environment]``: image, resources and the network of both phases (``network_mode``, or the older
    ``allow_internet``), unless ``[agent]`` / ``[verifier]`` override it. ``docker_image`` wins over
    ``environment/Dockerfile``; Harbor's ``memory`` / ``storage`` (``"2G"``) fill ``memory_mb`` / ``storage_mb``."""

    docker_image: str | None = None
    build_timeout_sec: Seconds = 600.0
    cpus: PositiveFloat = 1.0
    memory_mb: SizeMb = 2048
    storage_mb: SizeMb | None = None
    memory: SizeMb | None = None
    storage: SizeMb | None = None
    allow_internet: bool | None = None
    """``None``: not declared (the run's ``[runtime] network`` decides)."""

    @model_validator(mode="after")
    def _harbor_sizes(self) -> EnvironmentSection:
        if self.memory is not None and "memory_mb" not in self.model_fields_set:
            self.memory_mb = self.memory
        if self.storage is not None and self.storage_mb is None:
            self.storage_mb = self.storage
        return self

    def declared_network(self) -> NetworkPolicy | None:
        own = super().declared_network()
        if own is None and self.allow_internet is not None:
            return NetworkPolicy(mode="public" if self.allow_internet else "none")
        return own


class MetadataSection(_Section):
    category: str | None = None
    domain: str | None = None
    difficulty: str | None = None
    tags: list[str] = Field(default_factory=list)


class TaskConfig(BaseModel):
    """The parsed ``task.toml``: core's sections, and every other table kept as written (:attr:`tables`)."""

    model_config = ConfigDict(extra="allow")

    version: str = "1.0"
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    metadata: MetadataSection = Field(default_factory=MetadataSection)

    @property
    def tables(self) -> dict[str, Any]:
        """The tables and keys core does not read, by name, as task.toml holds them; plugins read theirs
        through :meth:`Task.section`."""
        return dict(self.model_extra or {})


T = TypeVar("T")


@lru_cache(maxsize=256)
def _adapter(schema: Any) -> TypeAdapter[Any]:
    return TypeAdapter(schema)


class Task(BaseModel):
    """A loaded task directory."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str
    """The task's name: its directory name, qualified by its parent folders when two loaded tasks share one."""
    path: Path
    instruction: str
    config: TaskConfig
    source_hash: str = ""
    """Hash of the task's resolved path and every file under it (and its world); see :func:`task_source_hash`."""
    deadline: float | None = None
    """When the agent's turn ends (seconds since the epoch, :func:`time.time`), on the task a harness's ``run``
    receives; ``None`` outside a trial. Harnesses read :meth:`time_left` to plan."""

    def time_left(self) -> float | None:
        """Seconds until :attr:`deadline` (0 once it passed), or ``None`` when no deadline is set."""
        if self.deadline is None:
            return None
        return max(self.deadline - time.time(), 0.0)

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

    def section(self, name: str, schema: type[T], *, owner: str) -> T | None:
        """Table (or key) ``name`` of task.toml validated with ``schema``, the owning plugin's model (a pydantic
        model, or any type pydantic validates such as ``list[Criterion]``); ``None`` when task.toml has no such
        table. A table the model refuses raises :class:`TaskError` naming task.toml, each bad field and
        ``owner``, the plugin that reads it."""
        raw = self.config.tables.get(name)
        if raw is None:
            return None
        try:
            return _adapter(schema).validate_python(raw)
        except ValidationError as exc:
            problems = format_validation_error(exc, name, sep="; ")
            raise TaskError(f"{self.path / 'task.toml'}: {problems} (the [{name}] table is read by the "
                            f"{owner} plugin)") from exc

    @property
    def category(self) -> str | None:
        return self.config.metadata.category or self.config.metadata.domain

    @property
    def domain(self) -> str | None:
        return self.config.metadata.domain or self.config.metadata.category

    @property
    def warnings(self) -> list[str]:
        """What a user should hear about this task.toml once: keys in core's sections that nothing reads (a
        typo, or a Harbor key tackroom has no use for: they change nothing here), and sizes given twice."""
        c = self.config
        solution = (c.model_extra or {}).get("solution")  # Harbor's [solution] env is for Harbor's oracle
        sections = {"agent": c.agent.model_extra, "verifier": c.verifier.model_extra,
                    "environment": c.environment.model_extra, "solution": solution if isinstance(solution, dict) else {}}
        unread = [f"{name}.{key}" for name, extra in sections.items() for key in (extra or {})]
        out = [f"task.toml keys that tackroom does not read (they have no effect): {', '.join(unread)}"] if unread else []
        env = c.environment
        if env.memory is not None and env.memory != env.memory_mb:
            out.append(f"task.toml: [environment] memory ({env.memory} MB) ignored; memory_mb ({env.memory_mb}) wins")
        return out


class PhaseNetworks(BaseModel):
    """The network of a trial's agent phase and grading phase, and whether the task declared each."""

    model_config = ConfigDict(frozen=True)

    agent: NetworkPolicy
    grading: NetworkPolicy
    agent_declared: bool
    grading_declared: bool

    def refused_by(self, sandbox: str, capabilities: frozenset[str]) -> str | None:
        """Why ``sandbox`` cannot run these networks (an allowlist it does not enforce, the internet it cannot
        grant), else None: asked up front (:func:`sandbox_refusal`)."""
        modes = (self.agent.mode, self.grading.mode)
        if "allowlist" in modes and "network_allowlist" not in capabilities:
            return (f"the {sandbox!r} sandbox cannot enforce a network allowlist ({self.agent.describe()} for the "
                    f"agent, {self.grading.describe()} for grading): run it on a sandbox that can (local, docker)")
        if "public" in modes and "network" not in capabilities:
            return (f"the {sandbox!r} sandbox cannot give a sandbox the internet ({self.agent.describe()} for the "
                    f"agent, {self.grading.describe()} for grading): it lacks the 'network' capability")
        return None


def sandbox_refusal(provider: SandboxProvider, task: Task, defaults: NetworkDefaults | None = None) -> str | None:
    """Why ``provider``'s sandboxes cannot run ``task`` as it asks, else None: what its capabilities say
    (:meth:`PhaseNetworks.refused_by`), then what the provider itself says (:meth:`SandboxProvider.refuses`).
    Drivers ask it once per task before they claim a run folder (``tackroom run``, ``tackroom matrix``,
    ``tackroom train``), so such a task is a task error named before the run, never a retried ``infra``; the
    attempt asks again as it starts, for drivers that did not."""
    networks = phase_networks(task.config, defaults)
    return networks.refused_by(provider.name, type(provider).capabilities) or provider.refuses(task)


def phase_networks(config: TaskConfig, defaults: NetworkDefaults | None = None) -> PhaseNetworks:
    """Each phase's network: its own section's keys (``[agent]`` / ``[verifier]`` ``network_mode``, as in
    Harbor), else ``[environment]``'s (``network_mode``, or the older ``allow_internet``), else the run's
    default (:class:`NetworkDefaults`: offline unless the run says otherwise)."""
    defaults = defaults or NetworkDefaults()
    base = config.environment.declared_network()
    agent = config.agent.declared_network() or base
    grading = config.verifier.declared_network() or base
    return PhaseNetworks(agent=agent or defaults.agent, grading=grading or defaults.grading,
                         agent_declared=agent is not None, grading_declared=grading is not None)


def check_links(root: Path) -> None:
    """Raise :class:`TaskError` when a symbolic link anywhere under ``root`` points outside it: a task file
    that is a link to a host file (instruction.md, a Dockerfile, a test) would copy that file into the run's
    files and sandboxes. The message names the link, never what it points to or holds."""
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            link = Path(folder, name)
            try:
                inside = not link.is_symlink() or link.resolve().is_relative_to(root)
            except (OSError, RuntimeError):  # a loop of links
                inside = False
            if not inside:
                raise TaskError(f"{link}: a symbolic link that points outside the task folder; a task's files must "
                                "lie inside it (copy the file in instead of linking it)")


HASH_IGNORED = frozenset({"__pycache__", ".git", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".DS_Store"})
"""Names left out of a task's content hash (caches and VCS data that change without the task changing)."""


def task_source_hash(path: str | Path) -> str:
    """SHA-256 (hex) of a task's resolved path and content: every file under it (name, executable bit, bytes),
    every symlink (its target text; links are never followed) and, for a world task, the world directory's
    content too. Special files (FIFOs, devices) count by name only and are never opened, so a hostile task
    cannot hang or exhaust the loader. Trial ids carry a prefix of it (:class:`tackroom._trial.Trial`)."""
    root = Path(path).resolve()
    h = hashlib.sha256(b"tackroom-task-source-v1\0")
    h.update(os.fsencode(str(root)) + b"\0")
    _hash_tree(root, h)
    world = _world_path(root)
    if world is not None:
        h.update(b"world\0" + os.fsencode(str(world)) + b"\0")
        _hash_tree(world, h)
    return h.hexdigest()


def _world_path(root: Path) -> Path | None:
    try:
        raw = tomllib.loads((root / "task.toml").read_text(encoding="utf-8"))
        world = raw.get("world", {}).get("path")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(world, str) or not world:
        return None
    resolved = (root / world).resolve()
    return resolved if resolved.is_dir() else None


def _hash_tree(root: Path, h: Any) -> None:
    pending = [""]
    while pending:
        rel = pending.pop()
        try:
            with os.scandir(root / rel if rel else root) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            h.update(b"unreadable-dir\0" + os.fsencode(rel) + f"\0{exc.errno}\0".encode())
            continue
        for entry in entries:
            if entry.name in HASH_IGNORED or entry.name.endswith(".pyc"):
                continue
            name = os.fsencode(f"{rel}/{entry.name}" if rel else entry.name)
            try:
                if entry.is_symlink():
                    h.update(b"L\0" + name + b"\0" + os.fsencode(os.readlink(entry.path)) + b"\0")
                elif entry.is_dir(follow_symlinks=False):
                    h.update(b"D\0" + name + b"\0")
                    pending.append(os.fsdecode(name))
                elif entry.is_file(follow_symlinks=False):
                    h.update(b"F\0" + name + b"\0" + _file_digest(entry.path) + b"\0")
                else:
                    h.update(b"S\0" + name + b"\0")
            except OSError as exc:
                h.update(b"E\0" + name + f"\0{exc.errno}\0".encode())


def _file_digest(path: str) -> bytes:
    """Executable bit and SHA-256 of a regular file, opened without following links or blocking."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped for something else since it was listed
            return b"not-a-regular-file"
        digest = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
        return (b"x" if st.st_mode & 0o111 else b"-") + digest.digest()
    finally:
        os.close(fd)


def load_task(path: str | Path, task_id: str | None = None) -> Task:
    """Load one task directory; raise :class:`TaskError` naming the file and the problem.

    ``task_id`` defaults to the directory's name (:func:`load_dataset` qualifies it when two
    tasks share a name).
    """
    root = Path(path).resolve()
    if not root.is_dir():
        raise TaskError(f"{root}: not a task directory (it does not exist or is a file)")
    check_links(root)
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
    try:
        config = TaskConfig.model_validate(raw)
    except ValidationError as exc:
        raise TaskError(f"{toml_file}: {format_validation_error(exc, sep='; ')}") from exc
    task = Task(id=task_id or root.name, path=root, instruction=instruction, config=config)
    world = raw.get("world")
    if isinstance(world, dict) and isinstance(world.get("path"), str) and world["path"] and _world_path(root) is None:
        # The content hash covers the world directory; one that is missing cannot be covered.
        raise TaskError(f"{toml_file}: [world].path {world['path']!r} does not exist ({(root / world['path']).resolve()})")
    task.source_hash = task_source_hash(root)
    for warning in task.warnings:  # once per load, where every command that loads tasks shows it (stderr)
        log.warning("%s: %s", root, warning)
    return task


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

    ``include``/``exclude``: shell-style patterns over task ids (qualified, or the plain directory name). A
    source that does not exist is an error (a typo must not shrink a run); a directory reached twice (also
    through a link) loads once; same-named tasks of two sources get ids qualified by parent folders (:func:`task_ids`).
    """
    from fnmatch import fnmatch

    if isinstance(sources, (str, Path)):
        sources = [sources]
    tasks: list[Task] = []
    failures: list[TaskLoadFailure] = []
    seen: set[Path] = set()
    found: list[Path] = []
    for source in sources:
        src = Path(source).resolve()
        if not src.exists():
            raise TaskError(f"{src}: no such task or dataset directory")
        candidates = [src] if is_task_dir(src) else sorted(p for p in src.iterdir() if p.is_dir())
        if not candidates:
            raise TaskError(f"{src}: no task directories inside (a task has instruction.md and task.toml)")
        for cand in candidates:
            real = cand.resolve()
            if real in seen:
                continue
            seen.add(real)
            found.append(real)
    ids = task_ids(found)
    for cand in found:
        tid = ids[cand]
        names = {tid, cand.name}
        if include and not any(fnmatch(n, pat) for n in names for pat in include):
            continue
        if exclude and any(fnmatch(n, pat) for n in names for pat in exclude):
            continue
        try:
            tasks.append(load_task(cand, task_id=tid))
        except TaskError as exc:
            failures.append(TaskLoadFailure(path=cand, message=str(exc)))
    return Dataset(tasks=tasks, failures=failures)


def task_ids(paths: list[Path]) -> dict[Path, str]:
    """Each task directory's id: its name, or ``parent/name`` (more parents as needed) where names collide."""
    ids: dict[Path, str] = {}
    by_name: dict[str, list[Path]] = {}
    for p in paths:
        by_name.setdefault(p.name, []).append(p)
    for name, group in by_name.items():
        if len(group) == 1:
            ids[group[0]] = name
            continue
        depth = 2
        while True:
            qualified = {p: "/".join(p.parts[-depth:]).lstrip("/") for p in group}
            if len(set(qualified.values())) == len(group) or depth >= max(len(p.parts) for p in group):
                ids.update({p: q if len(set(qualified.values())) == len(group) else str(p)
                            for p, q in qualified.items()})
                break
            depth += 1
    return ids
