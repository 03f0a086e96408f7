"""Planning and running a matrix: every (model, harness row, task, pass) trial through the trial runtime.

All trials of a matrix share one run directory (``<out>/<run-id>/``); a trial's
id is ``task-<task hash>__harness-label__model-label__pN``, so re-running the same
config reuses every finished trial and runs only the rest. A run directory remembers
what each label meant and every task's content hash (``matrix.config.json``, its
fingerprint); resuming with a changed harness option set, model, sandbox or verifier
under the same label, or with a task whose content changed, is refused, because the
old results would silently mix with the new (``--force-new`` starts a new run folder).
Nothing written there carries a credential.
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tackroom import ConfigError, Task, Trial, TrialResult
from tackroom.services import redact, redact_url
from tackroom_app import (
    Endpoint,
    PluginManager,
    TaskLoadFailure,
    TrialPlugins,
    TrialRuntime,
    get_plugin_manager,
    load_dataset,
    policy_routing,
)
from tackroom_matrix.config import MatrixConfig, ResolvedRow, resolve_plugins
from tackroom_matrix.endpoints import EndpointStatus, EndpointUnreachableError, probe_all
from tackroom_matrix.stats import CellStats, cell_stats

IDENTITY_FILE = "matrix.config.json"


@dataclass
class PlannedCell:
    """One (model, harness row) cell and the trials it holds."""

    model: str | None
    row: ResolvedRow
    plugins: TrialPlugins | None
    status: str = "ok"
    detail: str | None = None
    trials: list[tuple[Trial, Task]] = field(default_factory=list)
    routing: Endpoint | None = None
    """The model as a ``[policy]``, for the gateway routing of chat-only harnesses (None: no model)."""

    @property
    def key(self) -> tuple[str | None, str]:
        return (self.model, self.row.label)

    @property
    def title(self) -> str:
        return f"{self.row.label} × {self.model}" if self.model else self.row.label


@dataclass
class MatrixOutcome:
    """What a matrix run produced: statistics per cell plus what the reports need to explain them."""

    config: MatrixConfig
    run_dir: Path
    cells: list[CellStats]
    rows: list[ResolvedRow]
    tasks: list[Task]
    endpoints: dict[str, EndpointStatus]
    notices: list[str]
    failures: list[TaskLoadFailure]
    results: list[TrialResult]


def _identity(config: MatrixConfig, rows: list[ResolvedRow], tasks: list[Task] | None = None) -> dict[str, Any]:
    """The matrix's fingerprint: what each label means, sandbox, verifier and every task's content hash."""
    from tackroom_app import tasks_fingerprint

    return {
        "sandbox": redact({"name": config.sandbox.name, "options": config.sandbox.options}),
        "verifier": redact({"name": config.verifier.name, "options": config.verifier.options}),
        "harnesses": {r.label: r.row.identity() for r in rows},
        "models": {str(m.label): _endpoint_identity(m) for m in config.models},
        "tasks": tasks_fingerprint(tasks or []),
    }


def _endpoint_identity(model: Endpoint) -> dict[str, Any]:
    """What must not change under one model label between a run and its resumption (credentials masked: a rotated
    key or URL password is the same model)."""
    return redact({"endpoint": redact_url(model.endpoint), "model": model.served_name, "sampling": model.sampling,
                   "token_ids": model.token_ids})


def _read_identity(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / IDENTITY_FILE).read_text())
    except (OSError, ValueError):
        return None
    identity = data.get("identity") if isinstance(data, dict) else None
    return identity if isinstance(identity, dict) else None


def check_resumable(run_dir: Path, identity: dict[str, Any]) -> None:
    """Refuse to resume ``run_dir`` when a label that already has results now means something else,
    or a task's content changed since its results were made."""
    from tackroom_app import has_results, task_changes

    old = _read_identity(run_dir)
    if old is None:
        if has_results(run_dir):
            raise ConfigError(f"{run_dir} holds results but no readable {IDENTITY_FILE} (its fingerprint), so "
                              "they cannot be checked against this config. Start a new run with --force-new or "
                              "--run-id NEW; delete the directory to discard the old results.")
        return
    problems = []
    for part in ("sandbox", "verifier"):
        if part in old and old[part] != identity[part]:
            problems.append(f"{part}: was {old[part]}, now {identity[part]}")
    for part, noun in (("harnesses", "harness row"), ("models", "model")):
        for label, now in identity[part].items():
            before = old.get(part, {}).get(label)
            if before is not None and before != now:
                problems.append(f"{noun} {label!r}: was {before}, now {now}")
    problems += task_changes(old.get("tasks") or {}, identity.get("tasks") or {})
    if problems:
        raise ConfigError(
            f"{run_dir} holds results made with a different setup:\n  " + "\n  ".join(problems)
            + "\nStart a new run with --force-new or --run-id NEW (or give the changed row a new label); "
            "delete the directory to discard the old results."
        )


def record_identity(run_dir: Path, identity: dict[str, Any], config: MatrixConfig, cells: list[PlannedCell]) -> None:
    """Remember what each label means, for the labels about to get results; written before any trial
    runs, so an interrupted run is protected too. A model that is unreachable is not recorded, so its
    base_url can still be fixed before the next run."""
    old = _read_identity(run_dir) or {}
    running = [c for c in cells if c.status == "ok"]
    merged: dict[str, Any] = {
        "harnesses": {**old.get("harnesses", {}),
                      **{h: v for h, v in identity["harnesses"].items() if any(c.row.label == h for c in running)}},
        "models": {**old.get("models", {}),
                   **{m: v for m, v in identity["models"].items() if any(c.model == m for c in running)}},
    }
    for part in ("sandbox", "verifier"):
        if part in old or running:
            merged[part] = old.get(part, identity[part])
    merged["tasks"] = {**(old.get("tasks") or {}), **(identity.get("tasks") or {})}
    tmp = run_dir / f".{IDENTITY_FILE}.tmp"
    tmp.write_text(json.dumps({"identity": redact(merged), "config": redact(config.model_dump(mode="json"))},
                              indent=2, ensure_ascii=False), encoding="utf-8")
    tmp.replace(run_dir / IDENTITY_FILE)


def plan_cells(config: MatrixConfig, rows: list[ResolvedRow], sandbox: Any, verifier: Any, tasks: list[Task],
               endpoints: dict[str, EndpointStatus]) -> list[PlannedCell]:
    """Every cell with its trials: model rows per reachable-or-not model, reference rows once."""
    cells: list[PlannedCell] = []
    for row in rows:
        targets: list[Any] = config.models if row.needs_policy else [None]
        for model in targets:
            label = None if model is None else str(model.label)
            status = endpoints.get(label) if label else None
            policy = routing = None
            cell_status, detail = "ok", None
            if model is not None:
                if status is None or not status.reachable:
                    cell_status, detail = "unreachable", status.problem if status else "not probed"
                else:
                    served = status.model or model.served_name or "default"
                    policy, routing = model.policy(served), model.model_copy(update={"model": served})
            plugins = TrialPlugins(row.cls, row.options, sandbox, type(verifier), verifier.options,
                                   policy=policy, harness_label=row.label)
            cell = PlannedCell(label, row, plugins, cell_status, detail, routing=routing)
            for p in range(config.passes):
                for task in tasks:
                    trial = Trial.for_task(task, harness=row.label, sandbox=sandbox.name, verifier=verifier.name,
                                           model=label, pass_index=p)
                    cell.trials.append((trial, task))
            cells.append(cell)
    return cells


def _order(cells: list[PlannedCell]) -> list[tuple[Trial, Task, TrialPlugins]]:
    """Runnable trials, pass by pass, so a run stopped early still has every cell's first passes."""
    items = []
    by_pass: dict[int, list[tuple[Trial, Task, TrialPlugins]]] = {}
    for cell in cells:
        if cell.status != "ok" or cell.plugins is None:
            continue
        for trial, task in cell.trials:
            by_pass.setdefault(trial.pass_index, []).append((trial, task, cell.plugins))
    for p in sorted(by_pass):
        items.extend(by_pass[p])
    return items


def _executor_args(config: MatrixConfig) -> dict[str, Any]:
    """``executor``/``executor_options`` for the runtime, when this runtime has executors (asyncio always works)."""
    if "executor" in inspect.signature(TrialRuntime.__init__).parameters:
        return {"executor": config.runtime.executor, "executor_options": config.runtime.executor_options()}
    if config.runtime.executor != "asyncio":
        raise ConfigError(f"runtime.executor: {config.runtime.executor!r} is not available; use \"asyncio\"")
    return {}


class MatrixProgress:
    """A rich display: one bar for the whole matrix and one per cell, with error counts."""

    def __init__(self, cells: list[PlannedCell], runtime: TrialRuntime, console: Console, enabled: bool) -> None:
        self.progress = Progress(
            TextColumn("{task.description}", markup=False), BarColumn(bar_width=30), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("{task.fields[status]}"), console=console, disable=not enabled,
        )
        self.bars: dict[tuple[str | None, str], int] = {}
        self.errors: dict[tuple[str | None, str], int] = {}
        runnable = [c for c in cells if c.status == "ok"]
        resumed_total = 0
        total = sum(len(c.trials) for c in runnable)
        self.overall = self.progress.add_task("matrix", total=total, completed=0, status="")
        width = max((len(c.title) for c in cells), default=10)
        for cell in cells:
            if cell.status != "ok":
                self.progress.add_task(f"  {cell.title:<{width}}", total=len(cell.trials), completed=0,
                                       status="skipped: endpoint unreachable")
                continue
            done = sum(runtime.finished(t) is not None for t, _ in cell.trials)
            resumed_total += done
            self.bars[cell.key] = self.progress.add_task(f"  {cell.title:<{width}}", total=len(cell.trials),
                                                         completed=done, status=f"{done} resumed" if done else "")
            self.errors[cell.key] = 0
        self.progress.update(self.overall, completed=resumed_total,
                             status=f"{resumed_total} resumed" if resumed_total else "")

    def __enter__(self) -> MatrixProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def on_result(self, result: TrialResult) -> None:
        key = (result.model, result.harness)
        bar = self.bars.get(key)
        if bar is None:
            return
        if result.error is not None and result.error.error_class != "model":
            self.errors[key] += 1
        n = self.errors[key]
        self.progress.update(bar, advance=1, status=f"[red]{n} non-model errors[/]" if n else "")
        self.progress.update(self.overall, advance=1)


async def run_matrix(
    config: MatrixConfig,
    *,
    manager: PluginManager | None = None,
    progress: bool = True,
    console: Console | None = None,
    run_id: str | None = None,
    out: str | Path | None = None,
    on_notice: Callable[[str], None] | None = None,
    force_new: bool = False,
) -> MatrixOutcome:
    """Resolve plugins, probe model endpoints, run every trial (resuming finished ones), compute cell statistics.

    ``force_new``: never resume; when the run folder already holds a run, use a new one beside it.
    """
    from tackroom_app import (
        claim_run_dir,
        refuse_unrunnable,
        resolve_runtime,
        unique_trials,
        validated_run_id,
        with_overrides,
    )

    config = with_overrides(config, {}, source="matrix config")  # values set in code get the file's checks too
    if run_id is not None:
        validated_run_id(run_id)
    manager = manager or get_plugin_manager()
    resolve_runtime(config.runtime, source="matrix config", manager=manager)
    console = console or Console(stderr=True)
    notify = on_notice or (lambda message: console.print(f"[yellow]note:[/] {escape(message)}", highlight=False))
    if not config.tasks:
        raise ConfigError("tasks: no tasks given; list task or dataset directories, e.g. tasks = [\"../tasks\"]")
    executor_args = _executor_args(config)
    rows, sandbox, verifier, notices = resolve_plugins(config, manager)
    dataset = load_dataset(config.tasks, include=config.include or None, exclude=config.exclude or None)
    refuse_unrunnable(dataset, sandbox, config.runtime.network)  # named before the run folder is claimed
    if not dataset.tasks:
        detail = "; ".join(f.message for f in dataset.failures[:3])
        raise ConfigError(f"tasks: no task loaded from {', '.join(config.tasks)}" + (f" ({detail})" if detail else ""))
    used = [m for m in config.models if any(r.needs_policy for r in rows)]
    endpoints = await probe_all(used, timeout=config.probe_timeout_sec) if used else {}
    down = [s for s in endpoints.values() if not s.reachable]
    if down and config.require_models:
        raise EndpointUnreachableError("\n".join(str(s.problem) for s in down))
    for s in down:
        notices.append(f"{s.problem}. Its cells are marked as infra errors and nothing is run for them; "
                       "re-run the same command once it is up to fill them in.")
    for message in notices:
        notify(message)

    cells = plan_cells(config, rows, sandbox, verifier, dataset.tasks, endpoints)
    unique_trials([t for c in cells for t, _ in c.trials])
    identity = _identity(config, rows, dataset.tasks)
    run_dir = claim_run_dir(out or config.runtime.out, run_id or config.runtime.run_id or "matrix",
                            force_new=force_new)
    check_resumable(run_dir, identity)
    record_identity(run_dir, identity, config, cells)
    runtime = TrialRuntime(
        run_dir, attempts=config.runtime.attempts, concurrency=config.runtime.concurrency,
        prepare_ahead=config.runtime.prepare_ahead, teardown_timeout_sec=config.runtime.teardown_timeout_sec,
        retry_backoff_sec=config.runtime.retry_backoff_sec,
        manager=manager, progress=False, console=console, network=config.runtime.network,
        force_build=config.runtime.force_build, **executor_args,
    )
    async with contextlib.AsyncExitStack() as stack:
        for cell in cells:  # chat-only harnesses talk to their model through a policy gateway, as in `tackroom run`
            if cell.status == "ok" and cell.routing is not None:
                await stack.enter_async_context(policy_routing(cell.routing, cell.row.cls, cell.plugins, manager))
        with MatrixProgress(cells, runtime, console, progress) as display:
            results = await runtime.run_all(_order(cells), on_result=display.on_result)
    by_id = {r.trial_id: r for r in results}
    stats = []
    for cell in cells:
        if cell.status == "ok":
            cell_results = [by_id[t.id] for t, _ in cell.trials if t.id in by_id]
        else:  # earlier runs may have filled part of an unreachable model's cell
            cell_results = [r for t, _ in cell.trials if (r := runtime.finished(t)) is not None]
        stats.append(cell_stats(
            cell_results, model=cell.model, harness=cell.row.label, harness_name=cell.row.row.name,
            passes=config.passes, k=int(config.k or config.passes), n_planned=len(cell.trials),
            pass_threshold=config.pass_threshold, status=cell.status, status_detail=cell.detail,
        ))
    all_results = list(results) + [r for c in cells if c.status != "ok"
                                   for t, _ in c.trials if (r := runtime.finished(t)) is not None]
    return MatrixOutcome(config=config, run_dir=run_dir, cells=stats, rows=rows, tasks=dataset.tasks,
                         endpoints=endpoints, notices=notices, failures=dataset.failures, results=all_results)
