"""``[train] trackers``: every tracker receives the same per-step metrics, read back from what its real package
wrote (TensorBoard's event file, W&B's offline run file, MLflow's SQLite store); a missing package or an unknown
tracker is a ConfigError naming it; a tracker that fails mid-run is dropped with a warning and the run goes on;
the console's progress bar follows the steps; SkyRL's GPU trainer takes one tracker.

W&B (~80 MB installed) and MLflow (mlflow-skinny + SQLAlchemy + Alembic, ~70 MB) are not in the workspace: their
tests are slow and run with the packages added for the run:

    uv run --with wandb --with mlflow-skinny --with sqlalchemy --with alembic \\
        pytest -n 0 packages/train/tests/test_tracking.py -q
"""

from __future__ import annotations

import asyncio
import importlib.util
import struct
from pathlib import Path
from typing import Any

import pytest
from skyrl.train.generators.base import TrajectoryID

from tackroom import ConfigError
from tackroom_train import tracking
from tackroom_train.config import TrainConfig
from tackroom_train.tinker.pipeline import Sampled, Trained
from tackroom_train.tinker.records import StepRecord
from tackroom_train.tinker.rollouts import RolloutBatch
from tackroom_train.tinker.run_log import RunLog
from tackroom_train.tracking import ProgressTracker, TrackerSet, check_trackers, open_trackers

STEPS = [
    StepRecord(step=1, batch=1, version=0, staleness=0, mean_reward=0.25, reward_per_task={"a": 0.5, "b@x": 0.0},
               trained_trials=4, masked_trials=0, mismatch_mean=0.02, mismatch_max=0.3, loss=-0.1,
               mismatch_same_version=0.02,
               rollout_s=30.0, train_s=12.0, handoff_s=1.5, turns_per_episode=2.5, tool_calls_per_episode=1.25,
               tool_call_success=0.8, no_signal_groups=1, resampled_groups=1,
               rollout_metrics={"tackroom/trials": 8, "tackroom/episode/turns": 2.5}),
    StepRecord(step=2, batch=2, version=1, staleness=1, mean_reward=0.75, trained_trials=4, masked_trials=0,
               mismatch_mean=0.04, mismatch_max=0.5, mismatch_same_version=0.02, rollout_s=20.0, train_s=10.0,
               turns_per_episode=3.0,
               tool_calls_per_episode=2.0),
]


def _rollout() -> RolloutBatch:
    ids = [TrajectoryID(instance_id="a", repetition_id=k) for k in range(2)]
    return RolloutBatch(ids, {"rewards": [0.0, 1.0], "loss_masks": [[1], [1]]})  # type: ignore[arg-type]


def _run(trackers: list[Any], tmp_path: Path, lines: list[str]) -> RunLog:
    """Two steps through the RunLog, as the pipeline hands them over."""
    log = RunLog(tmp_path, steps_total=2, max_staleness=1, mismatch_warn=0.1, log=lines.append,
                 trackers=TrackerSet(trackers, lines.append))
    for record in STEPS:
        record = record.model_copy(deep=True)
        log.step(Trained(Sampled(record.batch, record.version, _rollout(), record.rollout_s), step=record.step,
                         staleness=record.staleness, changed=True, handoff_s=record.handoff_s, train_s=record.train_s),
                 record)
    log.trackers.close()
    return log


class Recorder:
    name = "recorder"

    def __init__(self) -> None:
        self.logged: list[tuple[int, dict[str, float]]] = []
        self.closed = False

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.logged.append((step, dict(metrics)))

    def close(self) -> None:
        self.closed = True


def expected() -> list[tuple[int, dict[str, float]]]:
    return [(r.step, r.metrics()) for r in STEPS]


def test_a_step_has_the_issue_metrics_under_stable_names() -> None:
    metrics = STEPS[0].metrics()
    for key, value in {"reward/mean": 0.25, "reward/a": 0.5, "episode/turns": 2.5, "episode/tool_calls": 1.25,
                       "episode/tool_call_success": 0.8, "mismatch/mean": 0.02, "mismatch/max": 0.3,
                       "mismatch/same_version": 0.02,
                       "policy/staleness": 0.0, "policy/version": 0.0, "time/rollout_s": 30.0,
                       "time/train_s": 12.0, "time/handoff_s": 1.5, "groups/no_signal": 1.0,
                       "groups/resampled": 1.0, "loss": -0.1, "rollout/trials": 8.0,
                       "reward/b_x": 0.0}.items():  # "@" is no tracker's name character
        assert metrics[key] == value, key
    later = STEPS[1].metrics()
    assert "loss" not in later and "time/handoff_s" not in later and "episode/tool_call_success" not in later
    assert all(isinstance(v, float) for v in later.values())


def test_unknown_tracker_names_are_refused_with_the_list() -> None:
    with pytest.raises(ValueError, match="'tensorboard', 'wandb' or 'mlflow'"):
        TrainConfig.model_validate({"tasks": ["x"], "model": {"path": "m"}, "train": {"trackers": ["tb"]}})
    with pytest.raises(ConfigError, match="unknown tracker 'neptune'; the trackers are tensorboard, wandb, mlflow"):
        check_trackers(["neptune"])


def test_a_tracker_without_its_package_is_a_config_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("wandb", "alembic")
                        else real(name, *a))
    with pytest.raises(ConfigError, match=r"'wandb' needs the package\(s\) wandb, not installed here; "
                                          r"pip install 'tackroom-train\[wandb\]'"):
        check_trackers(["tensorboard", "wandb"])
    with pytest.raises(ConfigError, match=r"'mlflow' needs the package\(s\) (mlflow-skinny )?(sqlalchemy )?alembic"):
        check_trackers(["mlflow"])


def test_the_run_refuses_a_missing_tracker_before_starting_anything(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    from tackroom_train.tinker import loop

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    monkeypatch.setattr(loop, "TinkerServer", lambda *a, **k: pytest.fail("a server was started"))
    config = TrainConfig.model_validate({"tasks": ["x"], "model": {"path": "m"}, "backend": "tinker",
                                         "train": {"trackers": ["wandb"]}})
    with pytest.raises(ConfigError, match="wandb"):
        asyncio.run(loop.run_tinker(config, tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def _tfrecords(path: Path) -> list[bytes]:
    data, out, at = path.read_bytes(), [], 0
    while at < len(data):
        (length,) = struct.unpack("<Q", data[at:at + 8])
        out.append(data[at + 12:at + 12 + length])
        at += 12 + length + 4
    return out


def read_tensorboard(folder: Path) -> list[tuple[int, dict[str, float]]]:
    from tensorboardX.proto import event_pb2

    steps: dict[int, dict[str, float]] = {}
    for path in folder.glob("events.out.tfevents.*"):
        for record in _tfrecords(path):
            event = event_pb2.Event.FromString(record)
            for value in event.summary.value:
                steps.setdefault(event.step, {})[value.tag] = value.simple_value
    return sorted(steps.items())


def test_tensorboard_receives_every_step_in_the_run_folder(tmp_path: Path) -> None:
    recorder = Recorder()
    lines: list[str] = []
    _run([recorder, *open_trackers(["tensorboard"], tmp_path, run_name="r", config={})], tmp_path, lines)
    assert recorder.logged == expected() and recorder.closed
    got = read_tensorboard(tmp_path / "tensorboard")
    assert [s for s, _ in got] == [1, 2]
    for (_, seen), (_, sent) in zip(got, expected()):
        assert seen == pytest.approx(sent)
    assert "2.5 turns and 1.2 tool calls per episode" in lines[0]
    assert "1 group(s) without signal, 1 more sampled in their place" in lines[0]


def test_a_failing_tracker_is_dropped_with_a_warning_and_the_others_go_on(tmp_path: Path) -> None:
    class Broken(Recorder):
        name = "broken"

        def log(self, metrics: dict[str, float], step: int) -> None:
            raise OSError("No space left on device")

    recorder, lines = Recorder(), []
    log = _run([Broken(), recorder], tmp_path, lines)
    assert recorder.logged == expected()
    assert [line for line in lines if "tracker broken failed at step 1" in line and "No space left" in line]
    assert log.trackers.failed == {"broken": "OSError: No space left on device"}
    assert len((tmp_path / "steps.jsonl").read_text().splitlines()) == 2


def test_the_progress_bar_follows_the_steps() -> None:
    from rich.console import Console
    from rich.progress import Progress

    console = Console(record=True, width=140, force_terminal=False)
    with Progress(*tracking.progress_columns(), console=console, auto_refresh=False) as bar:
        tracker = ProgressTracker(bar)
        trackers = TrackerSet([tracker], print)
        trackers.start(10)
        trackers.log(STEPS[0].metrics(), 1)
        task = bar.tasks[0]
        assert (task.completed, task.total) == (1, 10)
        assert task.fields == {"of": "10", "reward": "0.250", "mismatch": "0.020"}
        bar.refresh()
    shown = console.export_text()
    assert "step 1/10" in shown and "reward 0.250" in shown and "mismatch 0.020" in shown


def test_skyrl_gpu_trainer_takes_one_tracker() -> None:
    from tackroom_train.skyrl_config import skyrl_logger

    def knobs(**train: Any) -> Any:
        return TrainConfig.model_validate({"tasks": ["x"], "model": {"path": "m"}, "train": train}).train

    assert skyrl_logger(knobs()) == "console"
    assert skyrl_logger(knobs(trackers=["mlflow"])) == "mlflow"
    with pytest.raises(ConfigError, match="logs to one tracker"):
        skyrl_logger(knobs(trackers=["wandb", "mlflow"]))


def read_wandb(run_file: Path) -> list[tuple[int, dict[str, float]]]:
    """The history records of an offline W&B run file (a LevelDB-style log of protobuf records after a 7-byte
    ``:W&B`` header, in 32 KiB blocks)."""
    import json

    from wandb.proto import wandb_internal_pb2 as pb

    data, block = run_file.read_bytes(), 32768
    assert data[:4] == b":W&B"
    records, pending, at = [], b"", 7
    while at + 7 <= len(data):
        if block - at % block < 7:
            at += block - at % block
            continue
        length, kind = struct.unpack("<HB", data[at + 4:at + 7])
        chunk, at = data[at + 7:at + 7 + length], at + 7 + length
        if kind == 0 and length == 0:
            continue
        pending += chunk
        if kind in (1, 4):  # FULL or LAST
            records.append(pending)
            pending = b""
    steps = []
    for raw in records:
        record = pb.Record.FromString(raw)
        if record.WhichOneof("record_type") == "history":
            items = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in record.history.item}
            steps.append((int(items.pop("_step")), {k: v for k, v in items.items() if not k.startswith("_")}))
    return steps


@pytest.mark.slow
def test_wandb_offline_receives_every_step_in_the_run_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb", reason="W&B is an extra: uv run --with wandb pytest ... (see the module docstring)")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)  # offline: nothing may need a login
    recorder = Recorder()
    _run([recorder, *open_trackers(["wandb"], tmp_path, run_name="r", config={"train": {"lr": 0.002}})],
         tmp_path, [])
    runs = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1
    got = read_wandb(runs[0])
    assert [s for s, _ in got] == [1, 2]
    for (_, seen), (_, sent) in zip(got, expected()):
        assert seen == pytest.approx(sent)


@pytest.mark.slow
def test_mlflow_local_store_receives_every_step_in_the_run_folder(tmp_path: Path) -> None:
    pytest.importorskip("mlflow", reason="MLflow is an extra: uv run --with mlflow-skinny --with sqlalchemy "
                                         "--with alembic pytest ... (see the module docstring)")
    from mlflow.tracking import MlflowClient

    recorder = Recorder()
    _run([recorder, *open_trackers(["mlflow"], tmp_path, run_name="r", config={"train": {"lr": 0.002}})],
         tmp_path, [])
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("tackroom").experiment_id])
    assert run.info.run_name == "r" and run.info.status == "FINISHED" and run.data.params["train.lr"] == "0.002"
    for step, sent in expected():
        for key, value in sent.items():
            history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)}
            assert history[step] == pytest.approx(value), (key, step)
    assert "reward/b_x" in run.data.metrics
    assert not Path("mlruns").exists() or Path("mlruns").stat().st_mtime < run.info.start_time / 1000
