"""Step 1 of a Tinker step: a batch of rollouts through ``TackroomGenerator`` on the pinned policy version.

:class:`Rollouts` is the pipeline's producer side: it draws the next mini-batch of tasks (a fresh shuffle every
epoch), pins the sampler to the version the batch starts with, runs the generator (trial runtime, harness,
sandbox, verifier, masking rules) with SkyRL's own ``GeneratorInput`` and ``BatchMetadata``, and checks the
sampler afterwards: a batch the sampler cannot vouch for is never handed to the trainer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from statistics import mean
from typing import TYPE_CHECKING, Any, Iterator

from tackroom_train.dataset import POLICY_VERSION_EXTRA, row_extras, row_group
from tackroom_train.mix import harness_metrics, means_by
from tackroom_train.tinker.datums import CONSTRAINED_KEY
from tackroom_train.tinker.sampler import Sampler

if TYPE_CHECKING:
    from skyrl.train.generators.base import GeneratorInterface, GeneratorOutput, TrajectoryID


def task_batches(rows: list[dict[str, Any]], size: int, seed: int) -> Iterator[list[dict[str, Any]]]:
    """Mini-batches of tasks, a fresh shuffle every epoch."""
    rng = random.Random(seed)
    while True:
        order = list(rows)
        rng.shuffle(order)
        for i in range(0, len(order), size):
            yield order[i:i + size]


@dataclass
class RolloutBatch:
    """A batch's rows: SkyRL's trajectory ids and the generator's output, in the same order."""

    ids: list[TrajectoryID]
    output: GeneratorOutput
    no_signal_groups: int = 0
    """Groups drawn for the step whose trained rows all scored alike."""
    resampled_groups: int = 0
    """Groups drawn beyond the first batch in place of those (``[train] resample_rounds``)."""
    tasks: list[str] | None = None
    """Each row's task id, where it differs from its group (a task drawn twice in one step, a mix's task under a
    harness); None: the groups."""
    harnesses: list[str | None] | None = None
    """Each row's harness label in a mix (``[[harnesses]]``); None: one harness."""

    @property
    def groups(self) -> list[str]:
        """Each row's GRPO group: its task, under its harness in a mix (a task drawn again in a resample round is a
        group of its own)."""
        return [tid.instance_id for tid in self.ids]

    @property
    def task_ids(self) -> list[str]:
        return self.tasks if self.tasks is not None else self.groups

    @property
    def masked(self) -> list[bool]:
        """Rows the masking rules took out of training (no token with loss mask 1)."""
        return [not any(m) for m in self.output["loss_masks"]]

    def group_rows(self) -> dict[str, list[int]]:
        rows: dict[str, list[int]] = {}
        for i, group in enumerate(self.groups):
            rows.setdefault(group, []).append(i)
        return rows

    def signal_groups(self) -> set[str]:
        """Groups with learning signal: their trained (unmasked) rows did not all score alike."""
        rewards, masked = self.output["rewards"], self.masked
        return {g for g, rows in self.group_rows().items() if len({rewards[i] for i in rows if not masked[i]}) > 1}

    @property
    def oldest_version(self) -> int | None:
        """The oldest policy version any token of the batch was sampled under (per token where a turn was continued
        across a weight update), from its rollout metrics; None where no turn recorded one."""
        return (self.output.get("rollout_metrics") or {}).get("tackroom/turn_version_min")

    def harness_of(self, row: int) -> str | None:
        return None if self.harnesses is None else self.harnesses[row]

    def reward_per_task(self) -> dict[str, float]:
        """Mean reward per task (per ``<label>/<task>`` in a mix), in the order the rows come."""
        keys = [task if self.harness_of(i) is None else f"{self.harness_of(i)}/{task}"
                for i, task in enumerate(self.task_ids)]
        return means_by(keys, self.output["rewards"])

    def reward_per_harness(self) -> dict[str, float]:
        """Mean reward per harness label of a mix (empty for one harness)."""
        return means_by(self.harnesses or [], self.output["rewards"])


LIST_FIELDS = ("prompt_token_ids", "response_ids", "rewards", "loss_masks", "stop_reasons", "rollout_logprobs",
               "trajectory_ids", "trajectory_generation_times", CONSTRAINED_KEY)


def merge_metrics(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The rollout metrics of several generate calls as one: ``*_min`` / ``*_max`` the extremes, counts (ints)
    summed, means (floats) weighted by each call's ``tackroom/trials``."""
    weights = [float(p.get("tackroom/trials") or 0) for p in parts]
    out: dict[str, Any] = {}
    for key in dict.fromkeys(k for p in parts for k in p):
        values = [(p[key], w) for p, w in zip(parts, weights) if key in p]
        if key.endswith(("_min", "_max")):
            out[key] = (min if key.endswith("_min") else max)(v for v, _ in values)
        elif all(isinstance(v, int) for v, _ in values):
            out[key] = sum(v for v, _ in values)
        else:
            total = sum(w for _, w in values)
            out[key] = sum(float(v) * w for v, w in values) / total if total else mean(float(v) for v, _ in values)
    return out


def combine(draws: list[RolloutBatch], size: int) -> RolloutBatch:
    """One step's batch from its draws: the groups with learning signal first (in draw order), then groups
    without it, up to ``size`` groups; a task drawn twice keeps its second group apart (``task@round``)."""
    chosen: list[tuple[int, str, str]] = []  # (draw, group in the draw, group in the step)
    taken: set[str] = set()
    for want_signal in (True, False):
        for d, draw in enumerate(draws):
            signal = draw.signal_groups()
            for group in draw.group_rows():
                if (group in signal) == want_signal and (d, group) not in {(c[0], c[1]) for c in chosen}:
                    if len(chosen) < size:
                        name = group if group not in taken else f"{group}@{d}"
                        taken.add(name)
                        chosen.append((d, group, name))
    rows = {key: [] for key in LIST_FIELDS}
    ids, tasks, labels = [], [], []
    with_logprobs = all(draw.output.get("rollout_logprobs") is not None for draw in draws)
    for d, group, name in sorted(chosen, key=lambda c: c[0]):
        draw = draws[d]
        for i in draw.group_rows()[group]:
            for key in LIST_FIELDS:
                if key != "rollout_logprobs" or with_logprobs:
                    rows[key].append((draw.output.get(key) or [None] * len(draw.ids))[i])
            tid = draw.ids[i]
            ids.append(type(tid)(instance_id=name, repetition_id=tid.repetition_id))
            tasks.append(draw.task_ids[i])
            labels.append(draw.harness_of(i))
    output = dict(draws[0].output)
    output.update(rows)
    output["rollout_logprobs"] = rows["rollout_logprobs"] if with_logprobs else None
    if not any(draw.output.get(CONSTRAINED_KEY) for draw in draws):
        output.pop(CONSTRAINED_KEY, None)
    output["trajectory_ids"] = ids
    output["rollout_metrics"] = merge_metrics([draw.output.get("rollout_metrics") or {} for draw in draws])
    if any(draw.harnesses for draw in draws):  # each harness's mean over every draw's rows, not the draws' means
        output["rollout_metrics"].update(harness_metrics(
            [label for draw in draws for label in (draw.harnesses or [None] * len(draw.ids))],
            [reward for draw in draws for reward in draw.output["rewards"]]))
    no_signal = sum(len(draw.group_rows()) - len(draw.signal_groups()) for draw in draws)
    resampled = sum(len(draw.group_rows()) for draw in draws[1:])
    return RolloutBatch(ids, output, no_signal_groups=no_signal, resampled_groups=resampled,  # type: ignore[arg-type]
                        tasks=tasks if tasks != [tid.instance_id for tid in ids] else None,
                        harnesses=labels if any(label is not None for label in labels) else None)


class Rollouts:
    """``rollout(index, version)`` for :func:`~.pipeline.run_pipeline`.

    With ``resample_rounds`` > 0 a batch whose groups have no learning signal (every trained row of a group
    scored alike) is topped up: as many fresh groups as lacked signal are drawn from the next tasks, with the
    same policy version, up to ``resample_rounds`` times; the step then trains the groups with signal first
    (:func:`combine`), so its batch keeps ``mini_batch_size`` groups. The counts go to the step's record."""

    def __init__(self, generator: GeneratorInterface, sampler: Sampler, tasks: Iterator[list[dict[str, Any]]], *,
                 samples_per_prompt: int, temperature: float, max_generate_length: int,
                 resample_rounds: int = 0) -> None:
        self.generator = generator
        self.sampler = sampler
        self.tasks = tasks
        self.samples_per_prompt = samples_per_prompt
        self.sampling_params = {"temperature": temperature, "max_generate_length": max_generate_length}
        self.resample_rounds = resample_rounds

    async def __call__(self, index: int, version: int) -> RolloutBatch:
        self.sampler.pin(version)
        first = await self.draw(next(self.tasks), index, version)
        draws = [first]
        size = len(first.group_rows())
        for _ in range(self.resample_rounds):
            lacking = size - sum(len(d.signal_groups()) for d in draws)
            if lacking <= 0:
                break
            draws.append(await self.draw(next(self.tasks)[:lacking], index, version))
        return draws[0] if len(draws) == 1 else combine(draws, size)

    async def draw(self, rows: list[dict[str, Any]], index: int, version: int) -> RolloutBatch:
        """One generate call over ``rows`` × ``samples_per_prompt``, then the sampler's check."""
        from skyrl.train.generators.base import TRAINING_PHASE_TRAIN, BatchMetadata, GeneratorInput, TrajectoryID

        prompts, classes, extras, ids = [], [], [], []
        for row in rows:  # a group: one row's samples, so one task under one harness
            for k in range(self.samples_per_prompt):
                prompts.append(row["prompt"])
                classes.append(row["env_class"])
                extras.append({**row_extras(row), POLICY_VERSION_EXTRA: version})  # what a rollout service records
                ids.append(TrajectoryID(instance_id=row_group(row), repetition_id=k))
        output = await self.generator.generate(GeneratorInput(
            prompts=prompts, env_classes=classes,
            env_extras=extras, sampling_params=dict(self.sampling_params), trajectory_ids=ids,
            batch_metadata=BatchMetadata(global_step=index, training_phase=TRAINING_PHASE_TRAIN)))
        # the rollouts asked for what the sampler cannot do, or the engine failed them (masked as infra): stop
        await self.sampler.check(f"batch {index} (policy version {version})")
        tasks, labels = [e["task_id"] for e in extras], [e.get("harness") for e in extras]
        return RolloutBatch(ids, output, tasks=tasks if tasks != [tid.instance_id for tid in ids] else None,
                            harnesses=labels if any(label is not None for label in labels) else None)
