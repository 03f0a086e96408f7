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
    """Mean reward per task; in a mix per ``<label>/<task>`` (a task under one harness)."""
    reward_per_harness: dict[str, float] = {}
    """Mean reward per harness label of a mix (``[[harnesses]]``) with rows in the step; empty for one harness."""
    trained_trials: int
    """Rows a gradient flowed through (0 on a step without learning signal)."""
    masked_trials: int
    no_signal_trials: int = 0
    """Trained rows of a step that took no optimiser step (every group's rewards alike)."""
    mismatch_mean: float | None = None
    """Mean |trainer − rollout| logprob over the trained tokens measured (None: no trained token)."""
    mismatch_max: float | None = None
    mismatch_constrained: float | None = None
    """Mean |trainer − sampler| logprob over the trained tokens sampled under a grammar (structured outputs), left
    out of :attr:`mismatch_mean`: the grammar's renormalisation, which the trainer's own logprobs replace."""
    mismatch_free_sample: bool = False
    """:attr:`mismatch_mean` was measured on a free sample of the batch's version (every trained token of the step
    was sampled under a grammar), not on the trained tokens."""
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
    turns_per_episode: float | None = None
    """Mean engine calls (model turns) per episode of the batch (None: no episode recorded any)."""
    tool_calls_per_episode: float | None = None
    """Mean tool calls per episode (the harness's ``tool_calls``, terminus's ``commands_sent``, else the
    transcript's tool calls)."""
    tool_call_success: float | None = None
    """Mean share of an episode's tool calls that succeeded, where the harness reports it."""
    no_signal_groups: int = 0
    """Groups drawn for this step whose trained rows all scored alike (no learning signal)."""
    resampled_groups: int = 0
    """Groups drawn beyond the step's first batch because groups had no signal (``[train] resample_rounds``)."""
    mismatch_same_version: float | None = None
    """The run's trainer-vs-engine mismatch on the same weights so far: the mean over its staleness-0 steps
    (a staleness-s step's mismatch also holds s updates of the policy's drift)."""
    rollout_metrics: dict[str, Any] = {}
    """The generator's ``rollout_metrics`` for the batch."""

    def row(self) -> dict[str, Any]:
        """The flat row ``steps.jsonl`` and the curve hold: fixed columns, ``reward/<label>`` per harness of a mix,
        ``reward/<task>`` (``reward/<label>/<task>`` in a mix), the loss path's metrics, ``rollout/<metric>``;
        ``sent_rows`` only where a part of the batch was sent."""
        flat = self.model_dump(exclude={"reward_per_task", "reward_per_harness", "loss_metrics", "rollout_metrics",
                                        "sent_rows"})
        flat.update({f"reward/{label}": reward for label, reward in self.reward_per_harness.items()})
        flat.update({f"reward/{task}": reward for task, reward in self.reward_per_task.items()})
        if self.sent_rows is not None:
            flat["sent_rows"] = self.sent_rows
        flat.update(self.loss_metrics)
        flat.update({f"rollout/{k}": v for k, v in self.rollout_metrics.items()})
        return flat

    def metrics(self) -> dict[str, float]:
        """The step as the trackers get it: one flat ``{name: float}``, grouped by prefix (``reward/``: ``mean``,
        each harness's ``<label>`` in a mix, each task's; ``episode/``, ``mismatch/``, ``policy/``, ``time/``,
        ``groups/``, ``trials/``, ``rollout/``); a value that was not measured this step is left out rather than
        sent as 0; names as :func:`metric_name` makes them."""
        named: dict[str, float | int | bool | None] = {
            "reward/mean": self.mean_reward,
            "episode/turns": self.turns_per_episode, "episode/tool_calls": self.tool_calls_per_episode,
            "episode/tool_call_success": self.tool_call_success,
            "mismatch/mean": self.mismatch_mean, "mismatch/max": self.mismatch_max,
            "mismatch/constrained": self.mismatch_constrained,
            "mismatch/flagged": self.mismatch_flagged, "mismatch/same_version": self.mismatch_same_version,
            "policy/version": self.version, "policy/staleness": self.staleness,
            "time/rollout_s": self.rollout_s, "time/train_s": self.train_s, "time/handoff_s": self.handoff_s,
            "groups/no_signal": self.no_signal_groups, "groups/resampled": self.resampled_groups,
            "batches/dropped": self.dropped_batches,
            "trials/trained": self.trained_trials, "trials/masked": self.masked_trials,
            "trials/no_signal": self.no_signal_trials, "loss": self.loss,
        }
        named.update({f"reward/{label}": reward for label, reward in self.reward_per_harness.items()})
        named.update({f"reward/{task}": reward for task, reward in self.reward_per_task.items()})
        named.update({f"loss/{k}": v for k, v in self.loss_metrics.items()})
        named.update({f"rollout/{k.removeprefix('tackroom/')}": v for k, v in self.rollout_metrics.items()})
        return {metric_name(k): float(v) for k, v in named.items()
                if isinstance(v, (int, float)) and not (isinstance(v, float) and v != v)}


def metric_name(key: str) -> str:
    """A name every tracker keeps as it is: letters, digits and ``_-./``; anything else (a task id's ``@``)
    becomes ``_`` (TensorBoard and MLflow would each rewrite it their own way)."""
    return "".join(c if c.isalnum() or c in "_-./" else "_" for c in key)


class TrajectoryRecord(BaseModel):
    """One row of a batch: where it came from and what became of it (a line of ``trajectories.jsonl``)."""

    batch: int
    step: int | None
    """The step that trained its batch (None: the batch was dropped)."""
    version: int
    staleness: int
    task_id: str
    harness: str | None = None
    """The harness label it ran under, in a mix (``[[harnesses]]``); None: the run's one ``[harness]``."""
    group: str | None = None
    """Its GRPO group: the task (``task@label`` in a mix), ``…@round`` for a task drawn again in a resample round."""
    repetition: int
    reward: float
    masked: bool
    trained: bool
    """Whether a gradient flowed through it: its step updated the weights and the row was not masked."""
    dropped: bool
