"""A task set as SkyRL's prompt dataset: one JSONL row per task, the task's path in ``env_extras``.

With ``[[harnesses]]`` (:mod:`tackroom_train.config_mix`) the rows are tasks × harnesses: each row also names its
harness (``harness``: the row's label, which the generator runs it under) and its GRPO group (``group``: the task
under that harness, and the copy where ``weight`` > 1), so a group never mixes harnesses.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tackroom import ConfigError, SandboxProvider
from tackroom_app import NetworkDefaults, load_dataset, refuse_unrunnable

if TYPE_CHECKING:
    from tackroom_train.config_mix import MixedHarness

ENV_CLASS = "tackroom"
"""``env_class`` of every prompt row: the generator, not a SkyRL-Gym env, runs it."""


def prompt_rows(tasks: list[str], include: list[str] | None = None, exclude: list[str] | None = None, *,
                sandbox: SandboxProvider | None = None, network: NetworkDefaults | None = None) -> list[dict[str, Any]]:
    """Rows of SkyRL's ``PromptDataset``: ``prompt`` (chat messages), ``env_class`` and the extras. Tasks
    ``sandbox`` cannot run as they ask (``tackroom_app.refuse_unrunnable``) are left out, each named in a warning.

    The prompt is the task's instruction as one user message (SkyRL filters
    prompts longer than ``max_prompt_length`` with it); what the model really
    sees is up to the harness. ``task_id`` and ``task_path`` travel to the
    generator as ``env_extras``.
    """
    dataset = load_dataset(tasks, include=include or None, exclude=exclude or None)
    if sandbox is not None:
        loaded = len(dataset.failures)
        refuse_unrunnable(dataset, sandbox, network)
        for failure in dataset.failures[loaded:]:
            logging.getLogger(__name__).warning("not training on %s: %s", failure.path, failure.message)
    if not dataset.tasks:
        detail = "; ".join(f"{f.path}: {f.message}" for f in dataset.failures) or "no task directories found"
        raise ConfigError(f"tasks: no loadable task in {', '.join(tasks)} ({detail})")
    for task in (t for t in dataset.tasks if t.config.verifier.grade_service_writes):  # docs/threat-model.md
        logging.getLogger(__name__).warning("task %s sets [verifier] grade_service_writes = true: what the agent's kept "
                                            "services write while test.sh runs is graded, so a policy can learn to steer "
                                            "its reward that way", task.id)
    return [
        {"prompt": [{"role": "user", "content": task.instruction}], "env_class": ENV_CLASS,
         "task_id": task.id, "task_path": str(task.path)}
        for task in dataset.tasks
    ]


def mixed_rows(rows: list[dict[str, Any]], harnesses: list[MixedHarness]) -> list[dict[str, Any]]:
    """``rows`` (one per task) under every harness of the mix, ``weight`` copies each, task by task: each row
    with its ``harness`` label and its ``group`` (``<task>@<label>``, ``#<copy>`` from the second copy on)."""
    out = []
    for row in rows:
        for harness in harnesses:
            label = harness.row_label
            for copy in range(1, harness.weight + 1):
                group = f"{row['task_id']}@{label}" + (f"#{copy}" if copy > 1 else "")
                out.append({**row, "harness": label, "group": group})
    return out


def row_group(row: dict[str, Any]) -> str:
    """A prompt row's GRPO group (its episodes' ``TrajectoryID.instance_id``): the task, or, in a mix, the task
    under its harness (the row's ``group``)."""
    return str(row.get("group") or row["task_id"])


POLICY_VERSION_EXTRA = "policy_version"
"""An ``env_extras`` key the Tinker loop adds to a step's rows: the policy version they sample with (a rollout service
records it; SkyRL's rows carry none, and the batch's ``global_step`` stands in)."""


def row_extras(row: dict[str, Any]) -> dict[str, Any]:
    """What the generator reads of a prompt row (``env_extras``): the task, and in a mix its harness's label."""
    extras = {"task_id": row["task_id"], "task_path": row["task_path"]}
    if row.get("harness") is not None:
        extras["harness"] = row["harness"]
    return extras


def write_prompt_dataset(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Write the rows as JSONL (SkyRL reads ``.jsonl`` with ``datasets``)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return p
