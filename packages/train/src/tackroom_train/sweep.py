"""Train, serve, evaluate: a single run with ``[eval]``, or every ``[[arms]]`` arm and the table comparing them.

:func:`run_arms` (``tackroom train CONFIG`` when the config has ``[[arms]]``): for each arm, in order,

1. train it (tinker backend) into ``<run>/arms/<label>/`` — skipped when that folder already has a
   ``summary.json`` with a policy (resume: run the same command with the same ``--run-id``);
2. serve its ``policy/`` on ``[eval] port`` (one engine at a time, always stopped after);
3. evaluate it with ``[eval] passes`` through the matrix; the rows go into the arm's ``summary.json``
   (skipped when it already holds them);

then ``<run>/arms.json`` and ``<run>/arms.md`` hold the comparison (:class:`ArmsReport`). An arm that
fails is recorded with its error and the next arm runs; the command exits 1 when any arm failed.

:func:`train_and_evaluate` is steps 1–3 for one config; a single run with ``[eval]`` gets the same
table in its ``summary.json``. The three steps are a :class:`Steps` so tests can swap in fakes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from tackroom_train.arms import EvalRow, arm_configs, describe_arm
from tackroom_train.config import TrainConfig

Log = Callable[[str], None]


async def _real_train(config: TrainConfig, run_dir: Path, log: Log) -> Any:
    from tackroom_train.tinker.loop import run_tinker

    return await run_tinker(config, run_dir, log=log)


def _real_serve(model: str | None, name: str, config: TrainConfig, log: Log) -> contextlib.AbstractAsyncContextManager[str]:
    from tackroom_train.evaluation import serve

    return serve(model, name, config, log)


async def _real_evaluate(config: TrainConfig, label: str, base_url: str, served: str, out: Path,
                         log: Log) -> list[EvalRow]:
    from tackroom_train.evaluation import evaluate

    return await evaluate(config, label, base_url, served, out, log)


def _real_check(config: TrainConfig) -> None:
    from tackroom_train.evaluation import check_eval

    check_eval(config)


@dataclass
class Steps:
    """What train / serve / evaluate do (the real trainer, engine and matrix by default)."""

    train: Callable[[TrainConfig, Path, Log], Awaitable[Any]] = _real_train
    serve: Callable[[str | None, str, TrainConfig, Log], contextlib.AbstractAsyncContextManager[str]] = _real_serve
    evaluate: Callable[[TrainConfig, str, str, str, Path, Log], Awaitable[list[EvalRow]]] = _real_evaluate
    check: Callable[[TrainConfig], None] = _real_check
    served: list[str] = field(default_factory=list)
    """The names served, in order (for the record and the tests)."""


def _load_summary(path: Path) -> Any:
    from tackroom_train.tinker.loop import TinkerRunSummary

    try:
        return TinkerRunSummary.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None


async def train_and_evaluate(config: TrainConfig, run_dir: Path, *, label: str | None = None, steps: Steps | None = None,
                             log: Log = print, resume: bool = False) -> Any:
    """Train ``config`` into ``run_dir``, then (with ``[eval]``) serve and evaluate its policy; the summary
    (``summary.json``) gets the eval rows. ``resume``: reuse a finished training / evaluation found there."""
    steps = steps or Steps()
    label = label or run_dir.name
    summary = _load_summary(run_dir / "summary.json") if resume else None
    if summary is not None and summary.policy and Path(summary.policy).is_dir():
        log(f"{label}: training resumed from {run_dir / 'summary.json'} (policy {summary.policy})")
    else:
        summary = await steps.train(config, run_dir, log)
    if config.eval is None:
        return summary
    if summary.policy is None:
        log(f"{label}: no policy to evaluate ({summary.policy_error or 'training wrote none'}); no eval table")
        return summary
    if summary.eval is None:
        async with steps.serve(summary.policy, label, config, log) as base_url:
            steps.served.append(label)
            summary.eval = await steps.evaluate(config, label, base_url, label, run_dir, log)
        (run_dir / "summary.json").write_text(summary.model_dump_json(indent=2))
    else:
        log(f"{label}: evaluation resumed from {run_dir / 'summary.json'}")
    return summary


class ArmResult(BaseModel):
    """One arm: what it changed, how training went, and its eval rows."""

    label: str
    loss: str
    aggregation: str
    nudge: str
    harness_overrides: dict[str, Any] = {}
    seed: int
    status: Literal["ok", "failed"]
    error: str | None = None
    run_dir: str
    steps: int | None = None
    reward_per_step: list[float] = []
    mismatch_mean: float | None = None
    policy: str | None = None
    eval: list[EvalRow] = []


class ArmsReport(BaseModel):
    """``<run>/arms.json``: every arm's result (and the untrained base's eval rows when ``[eval] baseline``)."""

    run_dir: str
    seed: int
    passes: int | None
    arms: list[ArmResult]
    baseline: list[EvalRow] = []
    baseline_error: str | None = None
    """Why the base model's row is missing, when its evaluation failed."""

    def table_rows(self) -> list[dict[str, str]]:
        """One row per (arm, eval harness); arms without eval rows get one row saying why."""
        rows = []
        for row in self.baseline:
            rows.append(_row(row.model, "-", "-", "-", row, None))
        if self.baseline_error:
            rows.append({"arm": "base", "loss": "-", "aggregation": "-", "nudge": "-", "harness": "-", "pass@1": "-",
                         "reward": "-", "turns": "-", "asst tok/turn": "-", "tool-call success": "-",
                         "train reward": "-", "note": self.baseline_error.splitlines()[0][:120]})
        for arm in self.arms:
            train = _train_cell(arm)
            if not arm.eval:
                rows.append({"arm": arm.label, "loss": arm.loss, "aggregation": arm.aggregation, "nudge": arm.nudge,
                             "harness": "-", "pass@1": "-", "reward": "-", "turns": "-", "asst tok/turn": "-",
                             "tool-call success": "-", "train reward": train,
                             "note": (arm.error or "no [eval]").splitlines()[0][:120]})
            for row in arm.eval:
                rows.append(_row(arm.label, arm.loss, arm.aggregation, arm.nudge, row, train))
        return rows

    def markdown(self) -> str:
        rows = self.table_rows()
        cols = [c for c in COLUMNS if any(r.get(c) for r in rows)]
        lines = [f"Arms of {self.run_dir} (seed {self.seed}; pass@1 and reward: mean ± std over "
                 f"{self.passes} passes)", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(r.get(c, "") for c in cols) + " |" for r in rows]
        return "\n".join(lines) + "\n"

    def rich_table(self) -> Any:
        from rich.table import Table

        rows = self.table_rows()
        table = Table(title=f"arms (pass@1, reward: mean ± std over {self.passes} passes)")
        cols = [c for c in COLUMNS if any(r.get(c) for r in rows)]
        for c in cols:
            table.add_column(c)
        for r in rows:
            table.add_row(*(r.get(c, "") for c in cols))
        return table


COLUMNS = ("arm", "loss", "aggregation", "nudge", "harness", "pass@1", "reward", "turns", "asst tok/turn",
           "tool-call success", "train reward", "note")


def _pm(mean: float | None, std: float | None) -> str:
    if mean is None:
        return "-"
    return f"{mean:.3f} ± {std:.3f}" if std is not None else f"{mean:.3f}"


def _num(value: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if value is None else fmt.format(value)


def _train_cell(arm: ArmResult) -> str:
    r = arm.reward_per_step
    return f"{r[0]:.3f} → {r[-1]:.3f}" if r else "-"


def _row(label: str, loss: str, aggregation: str, nudge: str, row: EvalRow, train: str | None) -> dict[str, str]:
    note = ""
    if row.non_model_error_rate:
        note = f"{row.non_model_error_rate:.0%} non-model errors"
    return {"arm": label, "loss": loss, "aggregation": aggregation, "nudge": nudge, "harness": row.harness,
            "pass@1": _pm(row.pass_at_1, row.pass_at_1_std), "reward": _pm(row.mean_reward, row.reward_std),
            "turns": _num(row.turns), "asst tok/turn": _num(row.assistant_tokens_per_turn, "{:.1f}"),
            "tool-call success": _num(row.tool_call_success_rate, "{:.0%}"), "train reward": train or "-",
            "note": note}


async def _baseline(config: TrainConfig, run_dir: Path, steps: Steps, log: Log) -> list[EvalRow]:
    """The untrained model under the same ``[eval]``, in ``<run>/base/`` (``eval.json``; resumed when there)."""
    from pydantic import TypeAdapter

    adapter = TypeAdapter(list[EvalRow])
    out = run_dir / "base"
    out.mkdir(parents=True, exist_ok=True)
    done = out / "eval.json"
    if done.is_file():
        log(f"base: evaluation resumed from {done}")
        return adapter.validate_json(done.read_text())
    model = None if config.model.path == "smollm2" else _base_folder(config)
    async with steps.serve(model, "base", config, log) as base_url:
        steps.served.append("base")
        rows = await steps.evaluate(config, "base", base_url, "base", out, log)
    done.write_bytes(adapter.dump_json(rows, indent=2))
    return rows


def _base_folder(config: TrainConfig) -> str:
    from tackroom_train.tinker.loop import resolve_base_model

    return resolve_base_model(config.tinker.base_model or config.model.path)


async def run_arms(config: TrainConfig, run_dir: Path, *, steps: Steps | None = None, log: Log = print,
                   manager: Any = None) -> ArmsReport:
    """Every arm in order (see the module docstring); writes ``arms.json`` and ``arms.md`` after each arm."""
    steps = steps or Steps()
    arms = arm_configs(config, manager)  # every arm's overrides checked before anything trains
    if config.eval is not None:
        steps.check(config)
    report = ArmsReport(run_dir=str(run_dir), seed=config.train.seed,
                        passes=config.eval.passes if config.eval else None, arms=[])
    if config.eval is not None and config.eval.baseline:
        try:
            report.baseline = await _baseline(config, run_dir, steps, log)
        except Exception as exc:  # the arms still run; a re-run with the same --run-id retries the base
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            report.baseline_error = f"{type(exc).__name__}: {exc}"
            log(f"base model evaluation failed: {report.baseline_error}")
    for arm, arm_config in arms:
        arm_dir = run_dir / "arms" / arm.label
        arm_dir.mkdir(parents=True, exist_ok=True)
        (arm_dir / "config.json").write_text(arm_config.model_dump_json(indent=2))
        what = describe_arm(arm, arm_config, manager)
        result = ArmResult(label=arm.label, loss=what["loss"], aggregation=what["aggregation"], nudge=what["nudge"],
                           harness_overrides=what["harness"], seed=arm_config.train.seed, status="ok",
                           run_dir=str(arm_dir))
        log(f"=== arm {arm.label}: {what['loss']}, {what['aggregation']}, nudge {what['nudge']} → {arm_dir}")
        try:
            summary = await train_and_evaluate(arm_config, arm_dir, label=arm.label, steps=steps, log=log, resume=True)
        except Exception as exc:  # one arm's failure is recorded; the next arm still runs
            task = asyncio.current_task()
            if task is not None and task.cancelling():  # Ctrl-C, even where a library turned it into an error
                raise
            result.status, result.error = "failed", f"{type(exc).__name__}: {exc}"
            log(f"arm {arm.label} failed: {result.error}")
            summary = _load_summary(arm_dir / "summary.json")
        if summary is not None and result.status == "ok" and arm_config.eval is not None and summary.eval is None:
            result.status, result.error = "failed", f"not evaluated: no policy ({summary.policy_error})"
        if summary is not None:
            result.steps, result.reward_per_step = summary.steps, list(summary.reward_per_step)
            result.mismatch_mean, result.policy = summary.mismatch_mean, summary.policy
            result.eval = list(summary.eval or [])
        report.arms.append(result)
        write_report(report, run_dir)
    return report


def write_report(report: ArmsReport, run_dir: Path) -> None:
    (run_dir / "arms.json").write_text(report.model_dump_json(indent=2))
    (run_dir / "arms.md").write_text(report.markdown())


def read_report(run_dir: Path) -> ArmsReport:
    return ArmsReport.model_validate(json.loads((run_dir / "arms.json").read_text()))
