"""The seed's Step 1 as a gate: before the first optimiser step, run every training task through the very
rollout path training uses (same harness, sandbox, verifier, policy, concurrency) and refuse to train when
too many trials fail for reasons that are not the model's.

A reward of 0 from an infra fault (an engine 429, a sandbox that died) or a task fault (a broken test script)
teaches the policy noise; ``[train] max_error_rate`` (default 0.05) is how much of it a run accepts. The
pass writes ``preflight.json`` (and its trials under ``preflight/``) in the run directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from pydantic import BaseModel

from tackroom import TackroomError
from tackroom_train.dataset import row_extras, row_group


class PreflightRefusedError(TackroomError):
    """Too many non-model errors in the error-rate pass: training would learn from noise."""

    error_class = "infra"


class PreflightReport(BaseModel):
    """What the error-rate pass found."""

    trials: int
    errors: dict[str, int]
    """Trials per error class (``infra``, ``task``, ``model``)."""
    non_model_rate: float
    """(infra + task) / trials."""
    max_error_rate: float
    passed: bool
    examples: list[str] = []
    """Up to five non-model errors: trial id, class, phase, message."""
    folder: str = ""

    def describe(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in self.errors.items())
        head = (f"error-rate pass: {self.trials} trials, non-model error rate {self.non_model_rate:.1%} "
                f"(limit {self.max_error_rate:.1%}; {counts})")
        return "\n".join([head, *(f"  {e}" for e in self.examples)])


def report_from(metrics: dict[str, Any], trials: int, max_error_rate: float, folder: Path) -> PreflightReport:
    """The report for a generate() call's ``rollout_metrics`` over ``trials`` trials written under ``folder``."""
    errors = {cls: int(metrics.get(f"tackroom/errors_{cls}", 0)) for cls in ("infra", "task", "model")}
    rate = (errors["infra"] + errors["task"]) / trials if trials else 0.0
    examples = []
    for path in sorted(folder.glob("*/*/result.json")):
        try:
            result = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        error = result.get("error") or {}
        if error.get("class") in ("infra", "task"):  # result.json's key for TrialError.error_class
            examples.append(f"{result.get('trial_id')}: {error['class']} in {error.get('phase')}: "
                            f"{str(error.get('message', ''))[:200]}")
        if len(examples) == 5:
            break
    return PreflightReport(trials=trials, errors=errors, non_model_rate=rate, max_error_rate=max_error_rate,
                           passed=rate <= max_error_rate, examples=examples, folder=str(folder))


async def error_rate_pass(generator: Any, rows: list[dict[str, Any]], *, passes: int, max_error_rate: float,
                          temperature: float, max_generate_length: int, run_dir: Path,
                          log: Callable[[str], None] = print) -> PreflightReport:
    """Run each task (in a mix: each task under each harness, a ``weight``'s copies once) ``passes`` times through
    ``generator`` (a TackroomGenerator whose run root is ``run_dir/preflight``) and write
    ``run_dir/preflight.json``; the caller refuses when it did not pass."""
    from skyrl.train.generators.base import TrajectoryID

    once: dict[tuple[str, str | None], dict[str, Any]] = {}
    for row in rows:
        once.setdefault((row["task_id"], row.get("harness")), row)
    rows = list(once.values())
    prompts, extras, ids = [], [], []
    for row in rows:
        for k in range(passes):
            prompts.append(row["prompt"])
            extras.append(row_extras(row))
            ids.append(TrajectoryID(instance_id=row_group(row), repetition_id=k))
    what = "tasks" if not any(row.get("harness") for row in rows) else "(task, harness) rows"
    log(f"error-rate pass: {len(prompts)} trials ({len(rows)} {what} × {passes}) before training")
    out = await generator.generate({
        "prompts": prompts, "env_extras": extras, "trajectory_ids": ids,
        "sampling_params": {"temperature": temperature, "max_generate_length": max_generate_length},
        "batch_metadata": SimpleNamespace(global_step=0),
    })
    report = report_from(out["rollout_metrics"], len(prompts), max_error_rate, run_dir / "preflight")
    (run_dir / "preflight.json").write_text(report.model_dump_json(indent=2))
    log(report.describe())
    return report
