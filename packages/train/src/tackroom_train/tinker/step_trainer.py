"""Steps 2 and 3 of a Tinker step: GRPO advantages, then one loss path and the optimiser step.

:class:`StepTrainer` is the pipeline's consumer side. It turns a batch of rollouts into a
:class:`~.datums.Batch` (advantages per task group; masked rows stay in, training nothing), and then:

* the batch has learning signal (some trained row with a nonzero advantage): its loss path's
  forward-backward, then ``optim_step`` (Adam on the LoRA);
* it has none (every group's rewards alike): no optimiser step, since with a zero gradient Adam would still
  move the weights along its stale momentum and a task the policy had solved drifts back; a forward on one
  micro-batch of trained rows still measures the mismatch.

The loss path is chosen once per run from the plan's loss, ``[tinker] loss_fn`` and ``[train] tis_ratio_type``
(:class:`LossChoice`, :func:`loss_path`), one small class each:

* :class:`BuiltinLoss`: a Tinker built-in on the rows a gradient flows through (:meth:`~.datums.Batch.for_trainer`);
* :class:`CorrectedBuiltinLoss`: the same after a ``forward`` for π_old, with truncated importance sampling;
* :class:`CustomLoss`: the tackroom loss itself in torch, through Tinker's custom-loss path.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from statistics import mean
from typing import Any, Protocol

from tackroom import ConfigError
from tackroom_train.config import TrainKnobs
from tackroom_train.plan import LossPlan
from tackroom_train.tinker.client import TrainingClient
from tackroom_train.tinker.datums import (
    BUILTIN_LOSSES,
    Batch,
    Row,
    TackroomLoss,
    batch_from_output,
    datums,
    grpo_advantages,
    mismatch,
    reduced_loss,
    tis_ratios,
)
from tackroom_train.tinker.pipeline import Sampled
from tackroom_train.tinker.records import StepRecord
from tackroom_train.tinker.rollouts import RolloutBatch


def tinker_builtin(loss: LossPlan) -> tuple[str, dict[str, float] | None]:
    """The Tinker built-in (and its ``loss_fn_config``) the loss equals on-policy, as its
    ``LossSpec.mappings["tinker"]`` declares: a function of its options returning ``(built-in, loss_fn_config)``."""
    mapped = loss.mapped(
        "tinker", expected="a function of its options returning the Tinker built-in it equals on-policy and that "
        "built-in's loss_fn_config", otherwise=f"with no Tinker built-in to run it as, set [tinker] loss_fn to one "
        f"of {', '.join(BUILTIN_LOSSES)}, or 'tackroom' (the loss itself in torch, on a server given by [tinker] url)")
    if not (isinstance(mapped, tuple) and len(mapped) == 2 and mapped[0] in BUILTIN_LOSSES):
        raise ConfigError(f"loss.name: loss {loss.name!r}'s LossSpec.mappings['tinker'] returned {mapped!r}, not "
                          f"(built-in, loss_fn_config or None) with a built-in of {', '.join(BUILTIN_LOSSES)}")
    name, config = mapped
    return name, None if config is None else dict(config)


@dataclass(frozen=True)
class LossChoice:
    """The plan's loss and how it reaches the server: Tinker's ``loss_fn`` (and its config), or ``tackroom``."""

    loss: LossPlan
    loss_fn: str
    loss_fn_config: dict[str, float] | None = None

    @classmethod
    def choose(cls, loss: LossPlan, loss_fn: str) -> LossChoice:
        """``[tinker] loss_fn`` for ``loss``: ``auto`` is the loss's own Tinker mapping (:func:`tinker_builtin`)."""
        if loss_fn != "auto":
            return cls(loss, loss_fn)
        return cls(loss, *tinker_builtin(loss))

    @property
    def aggregation(self) -> str:
        return self.loss.aggregation

    def describe(self) -> str:
        """What the step minimises, in words."""
        how = "in torch, Tinker's custom-loss path" if self.loss_fn == "tackroom" else f"as Tinker's {self.loss_fn}"
        extra = f" {self.loss_fn_config}" if self.loss_fn_config else ""
        return f"{self.loss.describe()} ({how}{extra})"


@dataclass
class LossOutcome:
    """What a loss path's forward-backward gave: the loss, and the trainer's logprobs on the rows it measured."""

    loss: float | None
    measured: Batch
    """The rows :attr:`trainer_logprobs` belong to (the mismatch is taken over them)."""
    trainer_logprobs: list[list[float]]
    sent_rows: int | None = None
    """Rows sent when only a part of the batch went (None: the whole batch)."""
    metrics: dict[str, float] = field(default_factory=dict)


class LossPath(Protocol):
    """One way of running a step's forward-backward on the Tinker server."""

    async def forward_backward(self, batch: Batch, step: int) -> LossOutcome: ...


class BuiltinLoss:
    """A Tinker built-in (``importance_sampling``, ``ppo``, ``cispo``; ``auto`` maps the ``[loss]`` to one) on
    the rows a gradient flows through; the loss stays the whole batch's (:meth:`~.datums.Batch.for_trainer`)."""

    def __init__(self, client: TrainingClient, loss_fn: str, loss_fn_config: dict[str, float] | None, *,
                 micro_batch: int) -> None:
        self.client = client
        self.loss_fn = loss_fn
        self.loss_fn_config = loss_fn_config
        self.micro_batch = micro_batch

    def sent(self, batch: Batch) -> Batch:
        return batch.subset(batch.for_trainer(self.micro_batch))

    async def forward_backward(self, batch: Batch, step: int) -> LossOutcome:
        sent = self.sent(batch)
        old = None
        if sent.has_constrained:  # the sampler's logprobs there are the grammar's: a forward gives the trainer's
            old = await self.client.forward(datums(sent, with_advantages=False), f"step {step}: forward (constrained)")
        data = datums(sent, with_advantages=True, old_logprobs=old, old_everywhere=False)
        result = await self.client.forward_backward(data, self.loss_fn, self.loss_fn_config,
                                                    f"step {step}: forward_backward")
        return LossOutcome(reduced_loss(data, result.loss_fn_outputs), sent,
                           old if old is not None else self.client.logprobs(result), sent_rows=len(sent.rows))


class CorrectedBuiltinLoss(BuiltinLoss):
    """A built-in with off-policy correction (``[train] tis_ratio_type``, SkyRL's semantics): a ``forward``
    first gives the trainer's logprobs π_old, which become the loss's reference (its ratio π_θ/π_old), and each
    token's advantage is multiplied by the truncated π_old/π_sampler (:func:`~.datums.tis_ratios`)."""

    def __init__(self, client: TrainingClient, loss_fn: str, loss_fn_config: dict[str, float] | None, *,
                 micro_batch: int, knobs: TrainKnobs) -> None:
        super().__init__(client, loss_fn, loss_fn_config, micro_batch=micro_batch)
        self.ratio_type = knobs.tis_ratio_type
        self.token_cap = knobs.token_tis_ratio_clip_high
        self.sequence_cap = knobs.sequence_tis_ratio_clip_high

    async def forward_backward(self, batch: Batch, step: int) -> LossOutcome:
        sent = self.sent(batch)
        old = await self.client.forward(datums(sent, with_advantages=False), f"step {step}: forward (TIS)")
        ratios, metrics = tis_ratios(sent, old, self.ratio_type, token_cap=self.token_cap,
                                     sequence_cap=self.sequence_cap)
        data = datums(sent, with_advantages=True, old_logprobs=old, token_weights=ratios)
        result = await self.client.forward_backward(data, self.loss_fn, self.loss_fn_config,
                                                    f"step {step}: forward_backward")
        # the mismatch is the sampler's against the trainer before the update: π_old
        return LossOutcome(reduced_loss(data, result.loss_fn_outputs), sent, old, sent_rows=len(sent.rows),
                           metrics=metrics)


class CustomLoss:
    """The tackroom loss itself, in torch, through Tinker's custom-loss path (:class:`~.datums.TackroomLoss`):
    the server's forward gives logprobs, the loss and its gradient are computed here. The whole batch goes."""

    def __init__(self, client: TrainingClient, spec: Any, options: Any) -> None:
        self.client = client
        self.spec = spec
        self.options = options

    async def forward_backward(self, batch: Batch, step: int) -> LossOutcome:
        custom = TackroomLoss(self.spec, self.options, batch)
        await self.client.forward_backward_custom(datums(batch, with_advantages=False), custom,
                                                  f"step {step}: forward_backward (custom loss)")
        return LossOutcome(custom.last_loss, batch, custom.trainer_logprobs)


def loss_path(loss: LossChoice, knobs: TrainKnobs, client: TrainingClient, *, micro_batch: int) -> LossPath:
    """The run's loss path; a combination that cannot run is a :class:`ConfigError` with the fix."""
    if loss.loss_fn == "tackroom":
        if knobs.tis_ratio_type:
            raise ConfigError("[train] tis_ratio_type applies to Tinker's built-in losses; tinker.loss_fn = 'tackroom' "
                              "runs the loss itself (set loss_fn = 'auto' or drop tis_ratio_type)")
        return CustomLoss(client, loss.loss.spec, loss.loss.options)
    if knobs.tis_ratio_type:
        return CorrectedBuiltinLoss(client, loss.loss_fn, loss.loss_fn_config, micro_batch=micro_batch, knobs=knobs)
    return BuiltinLoss(client, loss.loss_fn, loss.loss_fn_config, micro_batch=micro_batch)


class StepTrainer:
    """``train(sampled, step, staleness)`` for :func:`~.pipeline.run_pipeline`: (whether the weights changed,
    the step's :class:`StepRecord`)."""

    def __init__(self, client: TrainingClient, path: LossPath, *, aggregation: str, learning_rate: float,
                 normalize_advantages: bool, micro_batch: int) -> None:
        self.client = client
        self.path = path
        self.aggregation = aggregation
        self.learning_rate = learning_rate
        self.normalize_advantages = normalize_advantages
        self.micro_batch = micro_batch
        """SkyRL's ``train_micro_batch_size`` (0: the server runs a batch fused); rows sent come in multiples."""
        self.free_sample: Callable[[int, list[int]], Awaitable[tuple[list[int], list[float]]]] | None = None
        """The engine's unconstrained completion of a prompt by a version (:meth:`EngineSampling.free_sample`): the
        mismatch of a step whose trained tokens were all sampled under a grammar is measured on it."""

    def batch(self, rollout: RolloutBatch) -> Batch:
        """The rows with their GRPO advantages (masked rows keep advantage 0 and an all-zero mask); a group is the
        rows of one ``TrajectoryID.instance_id``: one task, under one harness in a mix."""
        groups = rollout.groups
        advantages = grpo_advantages(rollout.output["rewards"], groups, rollout.masked,
                                     normalize=self.normalize_advantages)
        return batch_from_output(rollout.output, advantages, groups, self.aggregation)

    async def train(self, sampled: Sampled[RolloutBatch], step: int, staleness: int) -> tuple[bool, StepRecord]:
        rollout = sampled.output
        batch = self.batch(rollout)
        trains = batch.has_signal
        record = StepRecord(
            step=step, batch=sampled.index, version=sampled.version, staleness=staleness,
            mean_reward=mean(rollout.output["rewards"]), reward_per_task=rollout.reward_per_task(),
            reward_per_harness=rollout.reward_per_harness(),
            trained_trials=batch.trained_rows if trains else 0, masked_trials=sum(rollout.masked),
            no_signal_trials=0 if trains else batch.trained_rows,
            rollout_metrics=rollout.output["rollout_metrics"] or {},
            no_signal_groups=rollout.no_signal_groups, resampled_groups=rollout.resampled_groups)
        episode = record.rollout_metrics
        record.turns_per_episode = episode.get("tackroom/episode/turns")
        record.tool_calls_per_episode = episode.get("tackroom/episode/tool_calls")
        record.tool_call_success = episode.get("tackroom/episode/tool_call_success")
        if trains:
            outcome = await self.path.forward_backward(batch, step)
            measured = await self.measure(outcome, sampled.version, staleness, step)  # before the weights move
            await self.client.optim_step(self.learning_rate, f"step {step}: optim_step")
        elif batch.trained_rows:
            outcome = await self.probe(batch, step)
            measured = await self.measure(outcome, sampled.version, staleness, step)
        else:
            return trains, record
        record.loss, record.sent_rows, record.loss_metrics = outcome.loss, outcome.sent_rows, outcome.metrics
        record.mismatch_mean, record.mismatch_max = measured["mismatch_mean"], measured["mismatch_max"]
        record.mismatch_constrained = measured.get("mismatch_constrained_mean")
        record.mismatch_free_sample = bool(measured.get("free_sample"))
        return trains, record

    async def measure(self, outcome: LossOutcome, version: int, staleness: int, step: int) -> dict[str, Any]:
        """The step's :func:`~.datums.mismatch`; when every trained token was constrained (no mismatch on them),
        the one :meth:`free_mismatch` measures instead, marked ``free_sample``."""
        measured: dict[str, Any] = mismatch(outcome.measured, outcome.trainer_logprobs)
        if measured["mismatch_mean"] is None:
            free = await self.free_mismatch(outcome.measured, version, staleness, step)
            if free is not None:
                measured |= {"mismatch_mean": free["mismatch_mean"], "mismatch_max": free["mismatch_max"],
                             "free_sample": True}
        return measured

    async def free_mismatch(self, batch: Batch, version: int, staleness: int, step: int) -> dict[str, Any] | None:
        """The engine-vs-trainer mismatch on a free sample, for a step whose trained tokens were all sampled under
        a grammar: the engine completes the first trained row's prompt with the same version and no grammar, and
        the trainer (still on that version's weights: before the optimiser step, staleness 0) scores the same ids.
        None without an engine or at staleness ≥ 1."""
        if self.free_sample is None or staleness != 0:
            return None
        rows = [r for r in batch.rows if any(r.mask)]
        if not rows:
            return None
        prompt = rows[0].prompt_ids
        ids, logprobs = await self.free_sample(version, prompt)
        if not ids:
            return None
        row = Row(list(prompt), ids, [1] * len(ids), logprobs, 0.0, "free-sample")
        probe = Batch([row] * max(self.micro_batch, 1), self.aggregation)  # one micro-batch: no new shape
        trainer = await self.client.forward(datums(probe, with_advantages=False), f"step {step}: forward (free sample)")
        return mismatch(Batch([row], self.aggregation), trainer[:1])

    async def probe(self, batch: Batch, step: int) -> LossOutcome:
        """A step without learning signal: no optimiser step, but a forward on one micro-batch of trained rows
        measures the mismatch."""
        probe = batch.subset(batch.for_mismatch(self.micro_batch))
        logprobs = await self.client.forward(datums(probe, with_advantages=False), f"step {step}: forward (mismatch)")
        return LossOutcome(None, probe, logprobs, sent_rows=len(probe.rows))
