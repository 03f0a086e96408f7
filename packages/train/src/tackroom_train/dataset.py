"""A task set as SkyRL's prompt dataset: one JSONL row per task, the task's path in ``env_extras``."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from tackroom import ConfigError, SandboxProvider
from tackroom_app import NetworkDefaults, load_dataset, refuse_unrunnable

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


def write_prompt_dataset(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Write the rows as JSONL (SkyRL reads ``.jsonl`` with ``datasets``)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return p
