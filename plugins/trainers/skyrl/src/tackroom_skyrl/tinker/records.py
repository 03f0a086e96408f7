"""What a Tinker run records: one :class:`StepRecord` per optimiser step, one :class:`TrajectoryRecord` per row.

:class:`~.run_log.RunLog` writes them: ``steps.jsonl`` and ``reward_curve.csv`` hold :meth:`StepRecord.row`,
``trajectories.jsonl`` holds :class:`TrajectoryRecord` s. The flat row is the files' format (``reward/<task>``
and ``rollout/<metric>`` columns beside the fixed ones); the model keeps those maps as maps.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class StepRecord(BaseModel):
    """One step: the batch it trained, what the trainer did with it, and how long each side took."""

    step: int
    batch: int
    """The batch's 1-based draw order (a dropped batch takes a number and no step)."""
    version: int
    """The policy version the batch sampled with."""
    staleness: int
    """Versions published between the batch's sampling and its training."""
    mean_reward: float
    reward_per_task: dict[str, float] = {}
    trained_trials: int
    """Rows a gradient flowed through (0 on a step without learning signal)."""
    masked_trials: int
    no_signal_trials: int = 0
    """Trained rows of a step that took no optimiser step (every group's rewards alike)."""
    mismatch_mean: float | None = None
    """Mean |trainer − rollout| logprob over the trained tokens measured (None: no trained token)."""
    mismatch_max: float | None = None
    mismatch_flagged: bool = False
    """Whether :attr:`mismatch_mean` was above ``[train] logprob_mismatch_warn``."""
    loss: float | None = None
    """The loss the optimiser step minimised (None: no optimiser step)."""
    sent_rows: int | None = None
    """Rows sent to the trainer when only a part of the batch went (None: the whole batch)."""
    loss_metrics: dict[str, float] = {}
    """What the loss path adds (the off-policy correction's capped share)."""
    rollout_s: float = 0.0
    train_s: float = 0.0
    handoff_s: float | None = None
    """Seconds from the optimiser step to the new weights being the sampler's (None: no update)."""
    dropped_batches: int = 0
    """Batches dropped as too stale so far in the run."""
    rollout_metrics: dict[str, Any] = {}
    """The generator's ``rollout_metrics`` for the batch."""

    def row(self) -> dict[str, Any]:
        """The flat row ``steps.jsonl`` and the curve hold: fixed columns, ``reward/<task>``, the loss path's
        metrics, ``rollout/<metric>``; ``sent_rows`` only where a part of the batch was sent."""
        flat = self.model_dump(exclude={"reward_per_task", "loss_metrics", "rollout_metrics", "sent_rows"})
        flat.update({f"reward/{task}": reward for task, reward in self.reward_per_task.items()})
        if self.sent_rows is not None:
            flat["sent_rows"] = self.sent_rows
        flat.update(self.loss_metrics)
        flat.update({f"rollout/{k}": v for k, v in self.rollout_metrics.items()})
        return flat


class TrajectoryRecord(BaseModel):
    """One row of a batch: where it came from and what became of it (a line of ``trajectories.jsonl``)."""

    batch: int
    step: int | None
    """The step that trained its batch (None: the batch was dropped)."""
    version: int
    staleness: int
    task_id: str
    repetition: int
    reward: float
    masked: bool
    trained: bool
    """Whether a gradient flowed through it: its step updated the weights and the row was not masked."""
    dropped: bool
