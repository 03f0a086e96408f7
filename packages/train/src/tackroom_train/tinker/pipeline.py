"""The fully-async step pipeline of ``tackroom train --backend tinker``: rollouts ahead of the trainer, bounded.

One producer draws batches of rollouts, one after another, each with the policy version published when it
starts (the sampler is pinned to that version for the whole batch, so every trajectory of a batch has one
version). One consumer trains them in order. With ``max_staleness_steps = k`` the producer may run up to
``k`` batches ahead of the trainer: the rollouts for step N+1 run while step N trains (k ≥ 1), and with
k = 0 the loop is synchronous (on-policy).

The bound is enforced twice: the producer waits before starting a batch that could not be trained within
``k`` versions, and the consumer hard-drops a batch whose ``staleness`` (versions published since it was
sampled) is above ``k`` when its turn comes — it is never trained on, whatever the trainer's speed. A
dropped batch is counted (``dropped``) and the producer draws another.

A version is published (``publish``: on the engine, the LoRA saved and loaded; see :mod:`.engine_sampling`)
after each step that changed the weights, and before any batch sampled with it starts. A step without
learning signal keeps the version. An error in either side (the engine died: :class:`EngineSamplingError`)
stops both and is raised: nothing is trained on samples the run cannot vouch for.

The loop hands it its parts: ``rollout`` is :class:`~.rollouts.Rollouts`, ``train`` is
:meth:`~.step_trainer.StepTrainer.train`, ``publish`` is the :class:`~.sampler.Sampler`'s, and ``on_step`` /
``on_drop`` are the :class:`~.run_log.RunLog`'s.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Generic, TypeVar

from tackroom import InfraError

B = TypeVar("B")
"""What a rollout produces (the loop's :class:`~.rollouts.RolloutBatch`)."""
R = TypeVar("R")
"""What a trained step records (the loop's :class:`~.records.StepRecord`)."""


class EngineSamplingError(InfraError):
    """The engine the rollouts sample from died or refused mid-run; the run stops instead of training on
    samples of an unknown (stale, or base) policy version."""


@dataclass
class Sampled(Generic[B]):
    """One batch of rollouts and the policy version it was sampled with."""

    index: int
    """1-based order in which the producer drew it."""
    version: int
    """The version published when it started (the sampler pinned to it)."""
    output: B
    rollout_s: float
    oldest_version: int | None = None
    """The oldest version any of its tokens was sampled under, where its trajectories record it (a model call cut
    at a weight update and continued keeps its first tokens' version: ``TokenTurn.token_versions``)."""

    @property
    def staleness_from(self) -> int:
        """The version its staleness counts from: the oldest of its tokens', else the one it started with."""
        return self.version if self.oldest_version is None else min(self.version, self.oldest_version)


@dataclass
class Trained(Generic[B]):
    """What the consumer did with a batch."""

    sampled: Sampled[B]
    step: int | None
    """The optimiser step it became (None: dropped as too stale)."""
    staleness: int
    changed: bool = False
    handoff_s: float | None = None
    train_s: float = 0.0


@dataclass
class PipelineResult(Generic[B]):
    steps: list[Trained[B]] = field(default_factory=list)
    dropped: list[Trained[B]] = field(default_factory=list)
    version: int = 0


@dataclass
class _Counts:
    started: int = 0
    """Batches the producer has begun."""
    done: int = 0
    """Batches the consumer has finished with (trained or dropped)."""


async def run_pipeline(*, steps: int, max_staleness: int,
                       rollout: Callable[[int, int], Awaitable[B]],
                       train: Callable[[Sampled[B], int, int], Awaitable[tuple[bool, R]]],
                       publish: Callable[[int], Awaitable[float]],
                       on_step: Callable[[Trained[B], R], None] = lambda t, r: None,
                       on_drop: Callable[[Trained[B]], None] = lambda t: None,
                       lookahead: int | None = None,
                       oldest_version: Callable[[B], int | None] = lambda b: None) -> PipelineResult[B]:
    """Train ``steps`` steps.

    ``rollout(index, version)`` draws a batch with the published ``version``; ``train(sampled, step,
    staleness)`` trains it and returns (whether the weights changed, the step's record); ``publish(version)``
    makes the new weights the sampler's and returns the hand-off seconds. ``lookahead`` (default
    ``max_staleness``) is how many batches the producer may run ahead; only a test sets it higher, to see
    the consumer's drop at work. ``oldest_version(output)`` is the oldest version a batch's tokens were sampled
    under (None: not recorded); a batch's staleness counts from it when older than the one it started with."""
    ahead = max_staleness if lookahead is None else lookahead
    result: PipelineResult[B] = PipelineResult()
    queue: asyncio.Queue[Sampled[B]] = asyncio.Queue()
    progress = asyncio.Condition()
    counts = _Counts()

    async def produce() -> None:
        while True:
            async with progress:
                # within the bound, and no batch beyond what the remaining steps need
                await progress.wait_for(lambda: counts.started - counts.done <= ahead
                                        and counts.started < steps + len(result.dropped))
                counts.started += 1
                index, version = counts.started, result.version
            t0 = time.monotonic()
            output = await rollout(index, version)
            await queue.put(Sampled(index, version, output, time.monotonic() - t0, oldest_version(output)))

    async def consume() -> None:
        while len(result.steps) < steps:
            sampled = await queue.get()
            staleness = result.version - sampled.staleness_from
            if staleness > max_staleness:
                dropped = Trained(sampled, None, staleness)
                result.dropped.append(dropped)
                on_drop(dropped)
            else:
                step = len(result.steps) + 1
                t0 = time.monotonic()
                changed, record = await train(sampled, step, staleness)
                trained = Trained(sampled, step, staleness, changed, train_s=time.monotonic() - t0)
                if changed:
                    trained.handoff_s = await publish(result.version + 1)
                    result.version += 1  # only now may a batch start with it
                result.steps.append(trained)
                on_step(trained, record)
            async with progress:
                counts.done += 1
                progress.notify_all()

    producer, consumer = asyncio.ensure_future(produce()), asyncio.ensure_future(consume())
    try:
        done, _ = await asyncio.wait({producer, consumer}, return_when=asyncio.FIRST_COMPLETED)
        if producer in done:
            producer.result()  # raises the producer's error (it never returns by itself)
        consumer.result()
    finally:
        for task in (producer, consumer):
            if not task.done():
                task.cancel()
        await asyncio.gather(producer, consumer, return_exceptions=True)
    return result
