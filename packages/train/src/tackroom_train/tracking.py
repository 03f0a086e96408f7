"""Where a run's per-step metrics go besides the console: ``[train] trackers``.

``tensorboard`` (tensorboardX event files), ``wandb`` (Weights & Biases in offline mode: nothing leaves the
machine; ``wandb sync`` uploads later) and ``mlflow`` (a local SQLite store). Each is an optional extra of the
trainer plugin (``pip install 'tackroom-train[tensorboard]'`` …); asking for one whose package is missing is a
:class:`ConfigError` naming the package, raised before the run starts anything.

Every tracker gets the same flat ``{name: float}`` dict per step (:meth:`~.tinker.records.StepRecord.metrics`)
and writes under one folder of the run: ``<run>/tensorboard/``, ``<run>/wandb/``, ``<run>/mlflow/mlflow.db``.
A tracker that fails mid-run (a full disk, a broken store) is reported once and dropped: the run's own
``steps.jsonl`` stays the record, and a step is never lost to a dashboard.

The console stays: the step lines, and with :class:`ProgressTracker` (``tackroom train``) a rich progress bar
with the step, the last reward and the time left.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any, Callable, Literal, Protocol

from tackroom import ConfigError

TrackerName = Literal["tensorboard", "wandb", "mlflow"]

PACKAGES: dict[str, tuple[str, ...]] = {
    "tensorboard": ("tensorboardX",),
    "wandb": ("wandb",),
    "mlflow": ("mlflow", "sqlalchemy", "alembic"),
}
"""Tracker → the modules it imports (all must be importable); the extra of the same name installs them."""

DISTRIBUTIONS = {"tensorboardX": "tensorboardX", "wandb": "wandb", "mlflow": "mlflow-skinny",
                 "sqlalchemy": "sqlalchemy", "alembic": "alembic"}


class Tracker(Protocol):
    """One place the per-step metrics go."""

    name: str

    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


def check_trackers(names: list[str]) -> None:
    """Raise :class:`ConfigError` for a tracker whose package is not installed (or a name that is none)."""
    for name in names:
        if name not in PACKAGES:
            raise ConfigError(f"[train] trackers: unknown tracker {name!r}; the trackers are "
                              f"{', '.join(PACKAGES)} (the console is always on)")
        missing = [m for m in PACKAGES[name] if importlib.util.find_spec(m) is None]
        if missing:
            dists = " ".join(DISTRIBUTIONS[m] for m in missing)
            raise ConfigError(f"[train] trackers: {name!r} needs the package(s) {dists}, not installed here; "
                              f"pip install 'tackroom-train[{name}]' (or uv pip install {dists}), "
                              f"or drop {name!r} from [train] trackers")


def open_trackers(names: list[str], run_dir: Path, *, run_name: str, config: dict[str, Any]) -> list[Tracker]:
    """The trackers ``names`` asks for, each writing under ``run_dir``; ``config`` is recorded where the tracker
    keeps a run's parameters (W&B's config, MLflow's params)."""
    check_trackers(names)
    opened: list[Tracker] = []
    try:
        for name in dict.fromkeys(names):
            opened.append(_OPENERS[name](run_dir, run_name, config))
    except BaseException:
        for tracker in opened:
            tracker.close()
        raise
    return opened


class TensorBoardTracker:
    """Scalars in ``<run>/tensorboard/`` (tensorboardX): ``tensorboard --logdir <run>/tensorboard``."""

    name = "tensorboard"

    def __init__(self, run_dir: Path, run_name: str, config: dict[str, Any]) -> None:
        from tensorboardX import SummaryWriter

        self.folder = run_dir / "tensorboard"
        self.writer = SummaryWriter(logdir=str(self.folder))

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    """Weights & Biases in offline mode, in ``<run>/wandb/`` (``wandb sync <run>/wandb/offline-run-*`` uploads)."""

    name = "wandb"

    def __init__(self, run_dir: Path, run_name: str, config: dict[str, Any]) -> None:
        import wandb

        self.folder = run_dir / "wandb"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(mode="offline", dir=str(run_dir), project="tackroom", name=run_name, config=config,
                              settings=wandb.Settings(console="off", silent=True))

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        import wandb

        self.run.finish()
        wandb.teardown()  # stops the wandb-core service process it started for the run


class MlflowTracker:
    """MLflow's tracking API on a local SQLite store, ``<run>/mlflow/mlflow.db`` (``mlflow ui
    --backend-store-uri sqlite:///<run>/mlflow/mlflow.db``); experiment ``tackroom``, one MLflow run per run."""

    name = "mlflow"

    def __init__(self, run_dir: Path, run_name: str, config: dict[str, Any]) -> None:
        from mlflow.tracking import MlflowClient

        self.folder = run_dir / "mlflow"
        self.folder.mkdir(parents=True, exist_ok=True)
        self.uri = f"sqlite:///{self.folder / 'mlflow.db'}"
        self.client = MlflowClient(tracking_uri=self.uri)
        experiment = self.client.get_experiment_by_name("tackroom")
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(
            "tackroom", artifact_location=(self.folder / "artifacts").as_uri())
        self.run_id = self.client.create_run(experiment_id, run_name=run_name).info.run_id
        from mlflow.entities import Param

        params = [Param(k, str(v)[:500]) for k, v in _flat(config).items()][:100]
        if params:
            self.client.log_batch(self.run_id, params=params)

    def log(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in metrics.items()])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        elif value is not None and not isinstance(value, list):
            out[f"{prefix}{key}"] = value
    return out


_OPENERS: dict[str, Callable[[Path, str, dict[str, Any]], Tracker]] = {
    "tensorboard": TensorBoardTracker, "wandb": WandbTracker, "mlflow": MlflowTracker}


class ProgressTracker:
    """The console's progress bar (rich): step k/N, the last step's mean reward and mismatch, elapsed and left; for
    an ``[sft]`` warm start first a bar of its own, its last loss and trained tokens in front."""

    name = "progress"

    def __init__(self, progress: Any, total: int | None = None) -> None:
        self.progress = progress
        self.task = progress.add_task("", total=total, of="?" if total is None else str(total),
                                      reward="-", mismatch="-")
        self.sft_task: Any = None
        self.offset = 0
        """Steps of an earlier phase (the warm start): RL's step k arrives as k + offset."""

    def start(self, total: int, *, phase: str = "rl", offset: int = 0) -> None:
        if phase == "sft":
            self.progress.update(self.task, visible=False)
            self.sft_task = self.progress.add_task("sft ", total=total, of=str(total), reward="-", mismatch="-")
            return
        self.offset = offset
        self.progress.update(self.task, total=total, of=str(total), visible=True)

    def log(self, metrics: dict[str, float], step: int) -> None:
        if "sft/loss" in metrics and self.sft_task is not None:
            self.progress.update(self.sft_task, completed=step,
                                 description=f"sft loss {metrics['sft/loss']:.3f}, "
                                             f"{metrics.get('sft/trained_tokens', 0):.0f} tokens · ")
            return
        if "reward/mean" not in metrics:
            return
        reward = metrics.get("reward/mean")
        mismatch = metrics.get("mismatch/mean")
        self.progress.update(self.task, completed=step - self.offset,
                             reward="-" if reward is None else f"{reward:.3f}",
                             mismatch="-" if mismatch is None else f"{mismatch:.3f}")

    def close(self) -> None:
        self.progress.stop_task(self.task)
        if self.sft_task is not None:
            self.progress.stop_task(self.sft_task)


def progress_columns() -> tuple[Any, ...]:
    """The bar's columns: ``step 3/10 ━━━━ reward 0.417 mismatch 0.031 0:04:12 elapsed, 0:09:48 left`` (a warm
    start's bar says ``sft loss 1.234, 412 tokens · step 3/12`` in front)."""
    from rich.progress import BarColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return (TextColumn("{task.description}step {task.completed:.0f}/{task.fields[of]}"), BarColumn(),
            TextColumn("reward {task.fields[reward]}"), TextColumn("mismatch {task.fields[mismatch]}"),
            TimeElapsedColumn(), TextColumn("elapsed,"), TimeRemainingColumn(), TextColumn("left"))


class TrackerSet:
    """The run's trackers as one: each step to every tracker; a tracker that raises is reported once and dropped."""

    def __init__(self, trackers: list[Any], log: Callable[[str], None]) -> None:
        self.trackers = list(trackers)
        self.log_line = log
        self.failed: dict[str, str] = {}
        self.offset = 0
        """Steps an earlier phase of the run logged (an ``[sft]`` warm start's): a later step k goes out as
        k + offset, so every tracker's step axis only rises (W&B drops a step below one it has)."""

    def start(self, total: int, *, phase: str = "rl") -> None:
        """A phase of ``total`` steps begins: ``sft`` (the warm start) or ``rl``."""
        for tracker in self.trackers:
            if hasattr(tracker, "start"):
                tracker.start(total, phase=phase, offset=self.offset)

    def log(self, metrics: dict[str, float], step: int) -> None:
        step += self.offset
        for tracker in list(self.trackers):
            try:
                tracker.log(metrics, step)
            except Exception as exc:  # a dashboard never stops a run: steps.jsonl stays the record
                self.trackers.remove(tracker)
                self.failed[tracker.name] = f"{type(exc).__name__}: {exc}"
                self.log_line(f"WARNING: tracker {tracker.name} failed at step {step} and is dropped for the rest "
                              f"of the run ({type(exc).__name__}: {exc}); steps.jsonl has every step")

    def close(self) -> None:
        for tracker in self.trackers:
            try:
                tracker.close()
            except Exception as exc:
                self.log_line(f"WARNING: closing tracker {tracker.name}: {type(exc).__name__}: {exc}")
        self.trackers = []
