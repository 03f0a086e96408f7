"""Per-harness numbers of a mix (``[[harnesses]]``, :mod:`tackroom_train.config_mix`): plain functions the generator
(its rollout metrics, on both backends) and the Tinker loop's batches (the step's record) share."""

from __future__ import annotations

from statistics import mean
from typing import Any


def means_by(labels: list[str | None], values: list[float]) -> dict[str, float]:
    """The mean of ``values`` per label, labels in the order they first come; unlabelled values left out."""
    per: dict[str, list[float]] = {}
    for label, value in zip(labels, values):
        if label is not None:
            per.setdefault(label, []).append(value)
    return {label: mean(vs) for label, vs in per.items()}


def harness_metrics(labels: list[str | None], rewards: list[float]) -> dict[str, Any]:
    """Per harness of a mix (rows labelled): ``tackroom/harness/<label>/mean_reward``, the mean of the rewards the
    trainer gets for its rows; nothing for rows of a single harness. Only a mean: SkyRL's trainer merges its
    groups' metrics by the key's name (``mean`` averaged over the groups that report it, which keeps each
    harness's own), and a count named after a label such as ``terminus`` would be taken for a ``min``."""
    return {f"tackroom/harness/{label}/mean_reward": value for label, value in means_by(labels, rewards).items()}
