"""Step 1 of a Tinker step: a batch of rollouts through ``TackroomGenerator`` on the pinned policy version.

:class:`Rollouts` is the pipeline's producer side: it draws the next mini-batch of tasks (a fresh shuffle every
epoch), pins the sampler to the version the batch starts with, runs the generator (trial runtime, harness,
sandbox, verifier, masking rules) with SkyRL's own ``GeneratorInput`` and ``BatchMetadata``, and checks the
sampler afterwards: a batch the sampler cannot vouch for is never handed to the trainer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from tackroom_skyrl.tinker.sampler import Sampler

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

    @property
    def groups(self) -> list[str]:
        """Each row's GRPO group: its task."""
        return [tid.instance_id for tid in self.ids]

    @property
    def masked(self) -> list[bool]:
        """Rows the masking rules took out of training (no token with loss mask 1)."""
        return [not any(m) for m in self.output["loss_masks"]]


class Rollouts:
    """``rollout(index, version)`` for :func:`~.pipeline.run_pipeline`."""

    def __init__(self, generator: GeneratorInterface, sampler: Sampler, tasks: Iterator[list[dict[str, Any]]], *,
                 samples_per_prompt: int, temperature: float, max_generate_length: int) -> None:
        self.generator = generator
        self.sampler = sampler
        self.tasks = tasks
        self.samples_per_prompt = samples_per_prompt
        self.sampling_params = {"temperature": temperature, "max_generate_length": max_generate_length}

    async def __call__(self, index: int, version: int) -> RolloutBatch:
        from skyrl.train.generators.base import TRAINING_PHASE_TRAIN, BatchMetadata, GeneratorInput, TrajectoryID

        self.sampler.pin(version)
        prompts, classes, extras, ids = [], [], [], []
        for row in next(self.tasks):
            for k in range(self.samples_per_prompt):
                prompts.append(row["prompt"])
                classes.append(row["env_class"])
                extras.append({"task_id": row["task_id"], "task_path": row["task_path"]})
                ids.append(TrajectoryID(instance_id=row["task_id"], repetition_id=k))
        output = await self.generator.generate(GeneratorInput(
            prompts=prompts, env_classes=classes,
            env_extras=extras, sampling_params=dict(self.sampling_params), trajectory_ids=ids,
            batch_metadata=BatchMetadata(global_step=index, training_phase=TRAINING_PHASE_TRAIN)))
        # the rollouts asked for what the sampler cannot do, or the engine failed them (masked as infra): stop
        await self.sampler.check(f"batch {index} (policy version {version})")
        return RolloutBatch(ids, output)
