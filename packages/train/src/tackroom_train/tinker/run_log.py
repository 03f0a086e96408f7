"""What a Tinker run writes as it goes: the step lines, ``steps.jsonl``, ``trajectories.jsonl``, the reward curve.

:class:`RunLog` is the pipeline's ``on_step`` / ``on_drop``. Per trained step it flags the mismatch against
``[train] logprob_mismatch_warn``, prints the step's line, appends the step to ``steps.jsonl`` and its rows to
``trajectories.jsonl``, and rewrites ``reward_curve.csv`` (so a run stopped midway keeps its curve). A dropped
batch's rows go to ``trajectories.jsonl`` as dropped. :meth:`RunLog.finish` draws ``reward_curve.png`` and
prints the table.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean
from typing import Any, Callable

from tackroom_train.mismatch import mismatch_warning
from tackroom_train.tinker import curve
from tackroom_train.tinker.pipeline import Trained
from tackroom_train.tinker.records import StepRecord, TrajectoryRecord
from tackroom_train.tinker.rollouts import RolloutBatch
from tackroom_train.tracking import TrackerSet


def drift_warning(value: float, threshold: float, staleness: int, same_version: list[float]) -> str:
    """The warning for a step trained ``staleness`` updates after its batch was sampled: its mismatch also holds
    the policy's drift over those updates, which the staleness-0 steps' (same weights) do not."""
    if same_version:
        agree = (f"this run's staleness-0 steps (the same weights on both sides) measure {mean(same_version):.4f} "
                 f"(mean of {len(same_version)})")
    else:
        agree = "no staleness-0 step has measured the trainer against the engine on the same weights yet"
    return (f"mean |trainer - rollout| logprob {value:.4f} is above {threshold}, measured across {staleness} "
            f"update(s): it holds how far the policy moved since the batch was sampled; {agree}. Off-policy by "
            "that much, the importance ratio carries it ([train] tis_ratio_type truncates it)")


class RunLog:
    """The run directory's step and trajectory files, and the count of warnings and dropped batches."""

    def __init__(self, run_dir: Path, *, steps_total: int, max_staleness: int, mismatch_warn: float | None,
                 log: Callable[[str], None], trackers: TrackerSet | None = None,
                 harnesses: list[str] | None = None) -> None:
        self.run_dir = run_dir
        self.harnesses = list(harnesses or [])
        """The mix's harness labels (``[[harnesses]]``), in config order; empty: one harness."""
        self.trackers = trackers or TrackerSet([], log)
        """Where each step's :meth:`~.records.StepRecord.metrics` go besides the files (``[train] trackers``)."""
        self.steps_total = steps_total
        self.max_staleness = max_staleness
        self.mismatch_warn = mismatch_warn
        self.log = log
        self.records: list[StepRecord] = []
        self.warnings = 0
        """Steps whose mismatch was above :attr:`mismatch_warn`."""
        self.dropped = 0
        """Batches dropped as staler than :attr:`max_staleness`."""
        self.same_version: list[float] = []
        """The mismatch of each staleness-0 step: the trainer against the engine on the same weights."""

    @property
    def steps_path(self) -> Path:
        return self.run_dir / "steps.jsonl"

    @property
    def trajectories_path(self) -> Path:
        return self.run_dir / "trajectories.jsonl"

    @property
    def curve_csv(self) -> Path:
        return self.run_dir / "reward_curve.csv"

    @property
    def curve_png(self) -> Path:
        return self.run_dir / "reward_curve.png"

    def step(self, done: Trained[RolloutBatch], record: StepRecord) -> None:
        """A trained step: its timings joined to the record, then the line, ``steps.jsonl``, the trajectories and
        the curve."""
        record.rollout_s, record.train_s, record.handoff_s = done.sampled.rollout_s, done.train_s, done.handoff_s
        record.dropped_batches = self.dropped
        line = (f"step {done.step}/{self.steps_total}: mean reward {record.mean_reward:.3f}"
                f"{self.per_harness(record)} ({record.trained_trials} trained, {record.masked_trials} masked; "
                f"sampled with version {done.sampled.version}, staleness {done.staleness})")
        if record.turns_per_episode is not None:
            line += (f", {record.turns_per_episode:.1f} turns and {record.tool_calls_per_episode or 0.0:.1f} "
                     "tool calls per episode")
        if record.resampled_groups:
            line += (f"; {record.no_signal_groups} group(s) without signal, {record.resampled_groups} more "
                     "sampled in their place")
        if record.no_signal_trials:
            line += ("\n  every group's rewards are equal: no learning signal, "
                     "no optimiser step (the weights stay as they are)")
        if record.mismatch_mean is None and record.mismatch_constrained is not None:
            line += (", |trainer-rollout| logprob not measured: every trained token was sampled under a grammar (the "
                     f"engine's logprobs are the constrained distribution's, {record.mismatch_constrained:.3f} from the "
                     "trainer's; the trainer's own stand in)")
        if record.mismatch_mean is not None:
            line += (f", |trainer-rollout| logprob {record.mismatch_mean:.4f} (max {record.mismatch_max:.3f}"
                     f"{'' if done.staleness == 0 else ', across %d version(s)' % done.staleness})")
            if record.mismatch_free_sample:
                line += (" on a free sample of the same version (every trained token was sampled under a grammar, "
                         f"{record.mismatch_constrained:.3f} from the trainer's there; the trainer's own stand in)")
            elif record.mismatch_constrained is not None:
                line += (f" [grammar-constrained tokens left out: their sampler logprobs differ by "
                         f"{record.mismatch_constrained:.3f}; the trainer's own stand in]")
            if done.staleness == 0:
                self.same_version.append(record.mismatch_mean)
            record.mismatch_same_version = mean(self.same_version) if self.same_version else None
            warning = mismatch_warning(record.mismatch_mean, self.mismatch_warn)
            if warning is not None and done.staleness:
                warning = drift_warning(record.mismatch_mean, self.mismatch_warn, done.staleness, self.same_version)
            if warning is not None:
                self.warnings += 1
                record.mismatch_flagged = True
                line += f"\n  WARNING: {warning}"
        low = record.rollout_metrics.get("tackroom/turn_version_min")
        high = record.rollout_metrics.get("tackroom/turn_version_max")
        if low is not None and (low, high) != (done.sampled.version, done.sampled.version):
            line += (f"\n  WARNING: the batch was pinned to version {done.sampled.version} but its turns were sampled "
                     f"with versions {low}..{high}")
        self.records.append(record)
        self.trajectories(done, trained=done.changed)
        handoff = "" if done.handoff_s is None else f", {done.handoff_s:.1f}s hand-off"
        self.log(line + f"  [{record.rollout_s:.0f}s rollout, {record.train_s:.0f}s train{handoff}]")
        with self.steps_path.open("a") as f:
            f.write(json.dumps(record.row()) + "\n")
        curve.write_csv(self.rows(), self.curve_csv)
        self.trackers.log(record.metrics(), record.step)

    def per_harness(self, record: StepRecord) -> str:
        """`` [answer 0.500, archipelago -]``: each harness's mean reward in the step (``-``: none of its rows was
        drawn); empty for one harness."""
        if not self.harnesses:
            return ""
        parts = [f"{label} {'-' if label not in record.reward_per_harness else f'{record.reward_per_harness[label]:.3f}'}"
                 for label in self.harnesses]
        return f" [{', '.join(parts)}]"

    def harness_rewards(self) -> dict[str, list[float | None]]:
        """Each harness's mean reward per step (None: no row of it in that step); empty for one harness."""
        return {label: [r.reward_per_harness.get(label) for r in self.records] for label in self.harnesses}

    def drop(self, done: Trained[RolloutBatch]) -> None:
        """A batch staler than the bound when its turn came: counted, its rows recorded as dropped."""
        self.dropped += 1
        self.trajectories(done, trained=False)
        oldest = done.sampled.staleness_from
        since = "" if oldest == done.sampled.version else f" (its oldest tokens with version {oldest})"
        self.log(f"batch {done.sampled.index} dropped: sampled with version {done.sampled.version}{since}, "
                 f"{done.staleness} versions old (> max_staleness_steps {self.max_staleness})")

    def trajectories(self, done: Trained[RolloutBatch], *, trained: bool) -> None:
        rollout = done.sampled.output
        with self.trajectories_path.open("a") as f:
            for i, (tid, task, reward, mask) in enumerate(zip(rollout.ids, rollout.task_ids, rollout.output["rewards"],
                                                              rollout.output["loss_masks"])):
                record = TrajectoryRecord(
                    batch=done.sampled.index, step=done.step, version=done.sampled.version, staleness=done.staleness,
                    task_id=task, harness=rollout.harness_of(i), group=tid.instance_id, repetition=tid.repetition_id,
                    reward=reward, masked=not any(mask), trained=trained and any(mask), dropped=done.step is None)
                # a single harness's rows name none, as before the mix
                f.write(json.dumps(record.model_dump(exclude={"harness"} if record.harness is None else None)) + "\n")

    def rows(self) -> list[dict[str, Any]]:
        """The steps as the curve's rows."""
        return [r.row() for r in self.records]

    def finish(self, title: str) -> Path:
        """Draw ``reward_curve.png`` and print the table; the PNG's path."""
        rows = self.rows()
        png = curve.write_png(rows, self.curve_png, title=title, harnesses=self.harnesses)
        self.log(curve.render_table(rows, harnesses=self.harnesses))
        return png

    # -- what the summary reads ------------------------------------------------------------
    @property
    def rewards(self) -> list[float]:
        return [r.mean_reward for r in self.records]

    @property
    def mismatch_mean(self) -> float | None:
        measured = [r.mismatch_mean for r in self.records if r.mismatch_mean is not None]
        return mean(measured) if measured else None
