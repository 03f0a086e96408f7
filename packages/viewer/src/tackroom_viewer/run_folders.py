"""Run folders as ``tackroom run``, ``tackroom matrix`` and ``tackroom train`` write them, read as they are written.

Nothing is cached: every call reads the disk again, so a running job shows its new trials on the next request.
A file being written (a half-written ``steps.jsonl`` line, a JSON file another process is replacing) reads as
missing, never as an error page.

A **run** is a folder holding ``run.json`` (``tackroom run``), ``matrix.config.json``/``matrix.json``
(``tackroom matrix``), ``steps.jsonl``/``summary.json``/``rollouts/`` (``tackroom train``), or trial folders.
A **trial** is a folder holding ``result.json`` or ``trajectory.json``: directly in the run
(``<run>/<trial-id>/``), or in a batch folder of a training run (``<run>/rollouts/step00003-…/<trial-id>/``).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

RUN_MARKERS = ("run.json", "matrix.config.json", "matrix.json", "steps.jsonl", "summary.json", "trajectories.jsonl")
TRIAL_FILES = ("result.json", "trajectory.json")
TRIAL_DEPTH = 3
"""How deep under a run trial folders are looked for (``rollouts/<batch>/<trial>`` is 3)."""

RunKind = Literal["run", "matrix", "train", "folder"]


def read_regular(path: Path) -> bytes | None:
    """The bytes of ``path`` when it is a regular file, read without following a link at its name (a run folder
    shared or copied from elsewhere may hold ``result.json -> /etc/shadow``); None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None  # a FIFO, a device, a directory
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    except OSError:
        return None
    finally:
        os.close(fd)


def read_json(path: Path) -> Any | None:
    """The file's JSON, or None when it is missing, not a regular file (a link included), unreadable, half-written
    or nested past what the parser takes."""
    raw = read_regular(path)
    try:
        return None if raw is None else json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


def read_json_object(path: Path) -> dict[str, Any] | None:
    data = read_json(path)
    return data if isinstance(data, dict) else None


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The file's JSON objects, one a line; a line being appended (or any unreadable one) is skipped."""
    raw = read_regular(path)
    try:
        text = "" if raw is None else raw.decode("utf-8")
    except UnicodeDecodeError:
        return []
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _rel(path: Path, base: Path) -> str:
    """``path`` relative to ``base`` as a POSIX string, '' for ``base`` itself."""
    return "" if path == base else path.relative_to(base).as_posix()


def _is_trial_dir(path: Path) -> bool:
    return any((path / name).is_file() for name in TRIAL_FILES)


def _is_run_dir(path: Path) -> bool:
    if any((path / name).exists() for name in RUN_MARKERS) or (path / "rollouts").is_dir():
        return True
    try:
        return any(child.is_dir() and _is_trial_dir(child) for child in path.iterdir())
    except OSError:
        return False


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@dataclass
class TrialFolder:
    """One trial's folder: its ``result.json`` and ``trajectory.json`` as found now."""

    path: Path
    key: str
    """Its path relative to the viewer's root (what URLs name)."""
    group: str
    """Its parent folder relative to the run ('' for a trial directly in the run; ``rollouts/step00003-…``)."""

    @property
    def result(self) -> dict[str, Any] | None:
        return read_json_object(self.path / "result.json")

    @property
    def trajectory(self) -> dict[str, Any] | None:
        return read_json_object(self.path / "trajectory.json")

    def summary(self) -> TrialSummary:
        return TrialSummary.of(self, self.result)


@dataclass
class TrialSummary:
    """What the trial list shows and filters on."""

    key: str
    trial_id: str
    group: str
    task: str | None
    harness: str | None
    model: str | None
    reward: float | None
    error_class: str | None
    error_type: str | None
    stop_reason: str | None
    pass_index: int | None
    seconds: float | None
    state: Literal["finished", "no result"]
    """``no result``: a trajectory without a readable result.json (being written, or a trajectory-only import)."""

    @classmethod
    def of(cls, trial: TrialFolder, result: dict[str, Any] | None) -> TrialSummary:
        r = result or {}
        error = r.get("error") if isinstance(r.get("error"), dict) else {}
        timings = r.get("timings") if isinstance(r.get("timings"), dict) else {}
        pass_index = r.get("pass_index")
        return cls(
            key=trial.key, trial_id=_text(r.get("trial_id")) or trial.path.name, group=trial.group,
            task=_text(r.get("task")), harness=_text(r.get("harness")), model=_text(r.get("model")),
            reward=_number(r.get("reward")), error_class=_text(error.get("class")), error_type=_text(error.get("type")),
            stop_reason=_text(r.get("stop_reason")), pass_index=pass_index if isinstance(pass_index, int) else None,
            seconds=_number(timings.get("total")), state="finished" if result is not None else "no result")


@dataclass
class TrialFilter:
    """The trial list's filters (each empty: no filter). ``error`` is an error class, or ``none`` for no error."""

    harness: str = ""
    model: str = ""
    task: str = ""
    error: str = ""
    group: str = ""
    """A prefix of the trial's group (``rollouts/step00003-`` picks one training batch)."""
    reward_min: float | None = None
    reward_max: float | None = None

    def keeps(self, t: TrialSummary) -> bool:
        if self.harness and t.harness != self.harness:
            return False
        if self.model and (t.model or "") != self.model:
            return False
        if self.task and t.task != self.task:
            return False
        if self.group and not t.group.startswith(self.group):
            return False
        if self.error and (t.error_class or "none") != self.error:
            return False
        if self.reward_min is not None and (t.reward is None or t.reward < self.reward_min):
            return False
        return self.reward_max is None or (t.reward is not None and t.reward <= self.reward_max)

    @property
    def active(self) -> bool:
        return any((self.harness, self.model, self.task, self.error, self.group,
                    self.reward_min is not None, self.reward_max is not None))


@dataclass
class GridCell:
    trials: list[TrialSummary] = field(default_factory=list)

    @property
    def counted(self) -> list[TrialSummary]:
        return [t for t in self.trials if t.error_class in (None, "model") and t.state == "finished"]

    @property
    def passed(self) -> int:
        return sum(1 for t in self.counted if t.reward is not None and t.reward >= 1.0)

    @property
    def mean_reward(self) -> float | None:
        rewards = [t.reward for t in self.counted if t.reward is not None]
        return sum(rewards) / len(rewards) if rewards else None

    @property
    def errors(self) -> int:
        return sum(1 for t in self.trials if t.error_class in ("infra", "task"))


@dataclass
class TaskGrid:
    """Tasks × (harness, model) columns, built from the trials themselves (so a running matrix has one too)."""

    columns: list[tuple[str | None, str | None]]
    rows: list[tuple[str, dict[tuple[str | None, str | None], GridCell]]]


@dataclass
class RunFolder:
    """One run folder under the viewer's root."""

    path: Path
    key: str
    """Its path relative to the root ('' when the root is the run)."""

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def kind(self) -> RunKind:
        if (self.path / "matrix.config.json").exists() or (self.path / "matrix.json").exists():
            return "matrix"
        if any((self.path / n).exists() for n in ("steps.jsonl", "trajectories.jsonl", "rollouts")):
            return "train"
        if (self.path / "run.json").exists():
            return "run"
        return "folder"

    @property
    def config(self) -> dict[str, Any] | None:
        """run.json, or the matrix's recorded config (credentials were masked by the writer)."""
        run = read_json_object(self.path / "run.json")
        if run is not None:
            return run
        matrix = read_json_object(self.path / "matrix.config.json")
        return matrix.get("config") if matrix and isinstance(matrix.get("config"), dict) else None

    @property
    def matrix_report(self) -> dict[str, Any] | None:
        """matrix.json, written when the matrix finished (None while it runs)."""
        return read_json_object(self.path / "matrix.json")

    @property
    def steps(self) -> list[dict[str, Any]]:
        """steps.jsonl of a Tinker training run: one row per optimiser step (StepRecord.row())."""
        return [s for s in read_jsonl(self.path / "steps.jsonl") if isinstance(s.get("step"), int)]

    @property
    def trajectory_rows(self) -> list[dict[str, Any]]:
        """trajectories.jsonl of a Tinker training run: each rollout row's batch, step, reward, mask."""
        return read_jsonl(self.path / "trajectories.jsonl")

    @property
    def summary(self) -> dict[str, Any] | None:
        return read_json_object(self.path / "summary.json")

    def trials(self, root: Path) -> list[TrialFolder]:
        found: list[TrialFolder] = []
        self._walk(self.path, root, 0, found)
        return sorted(found, key=lambda t: (t.group, t.path.name))

    def _walk(self, folder: Path, root: Path, depth: int, found: list[TrialFolder]) -> None:
        if depth >= TRIAL_DEPTH:
            return
        try:
            children = sorted(c for c in folder.iterdir() if c.is_dir() and not c.is_symlink())
        except OSError:
            return
        for child in children:
            if _is_trial_dir(child):
                found.append(TrialFolder(child, _rel(child, root), _rel(folder, self.path)))
            else:
                self._walk(child, root, depth + 1, found)

    def batch_prefix(self, batch: int) -> str:
        """The group prefix of a training batch's trial folders (the generator names them ``step<batch>-…``)."""
        return f"rollouts/step{batch:05d}-"


def task_grid(trials: list[TrialSummary]) -> TaskGrid:
    columns = list(dict.fromkeys((t.harness, t.model) for t in trials))
    rows: dict[str, dict[tuple[str | None, str | None], GridCell]] = {}
    for t in trials:
        rows.setdefault(t.task or "(unknown task)", {}).setdefault((t.harness, t.model), GridCell()).trials.append(t)
    return TaskGrid(columns, sorted(rows.items()))


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # removed while listed
        return 0.0


def find_runs(root: Path) -> list[RunFolder]:
    """The runs under ``root``: ``root`` itself when it is one, else its run folders (newest first)."""
    root = root.resolve()
    if _is_run_dir(root):
        return [RunFolder(root, "")]
    try:
        children = [c for c in root.iterdir() if c.is_dir() and not c.is_symlink() and _is_run_dir(c)]
    except OSError:
        return []
    children.sort(key=_mtime, reverse=True)
    return [RunFolder(c, c.name) for c in children]


def inside(root: Path, key: str) -> Path | None:
    """``root/key`` when it stays inside ``root`` (no ``..``, no symlink out), else None."""
    root = root.resolve()
    try:
        path = (root / key).resolve()
    except (OSError, RuntimeError):
        return None
    return path if path == root or path.is_relative_to(root) else None


def run_of(root: Path, path: Path) -> RunFolder | None:
    """The run folder a trial folder belongs to: the nearest ancestor that is a run (or the root itself)."""
    root = root.resolve()
    for parent in [*path.parents]:
        if not (parent == root or parent.is_relative_to(root)):
            break
        if _is_run_dir(parent):
            return RunFolder(parent, _rel(parent, root))
    return None


def trial_at(root: Path, key: str) -> TrialFolder | None:
    path = inside(root, key)
    if path is None or not path.is_dir() or not _is_trial_dir(path):
        return None
    run = run_of(root, path)
    group = "" if run is None else _rel(path.parent, run.path)
    return TrialFolder(path, _rel(path, root.resolve()), group)
