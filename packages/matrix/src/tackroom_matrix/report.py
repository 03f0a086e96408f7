"""The matrix report: one data model (``matrix.json``) and its renderings (terminal table, CSV, HTML)."""

from __future__ import annotations

import csv
import io
import math
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tackroom.services import redact
from tackroom_matrix.stats import ERROR_CLASSES, CellStats


class ModelInfo(BaseModel):
    label: str
    endpoint: str
    model: str | None
    reachable: bool | None
    """None when no harness row used this model (it was not probed)."""
    problem: str | None = None


class HarnessInfo(BaseModel):
    label: str
    name: str
    needs_policy: bool
    options: dict[str, Any] = Field(default_factory=dict)


class TaskInfo(BaseModel):
    id: str
    domain: str | None
    category: str | None


class TransferRow(BaseModel):
    """One harness row of the transfer view: the same harness under a baseline and a candidate model."""

    harness: str
    baseline: str
    candidate: str
    baseline_pass_at_1: float | None
    candidate_pass_at_1: float | None
    gain: float | None
    """candidate − baseline pass@1 (absolute, in [−1, 1])."""
    baseline_pass_at_1_std: float | None = None
    candidate_pass_at_1_std: float | None = None
    gain_std: float | None = None
    """√(baseline std² + candidate std²): the spread of the gain from pass to pass, the two cells taken as
    independent. A gain within it is noise."""
    beyond_noise: bool | None = None
    """|gain| > gain_std (None when either is unknown)."""
    baseline_mean_reward: float | None
    candidate_mean_reward: float | None
    reward_gain: float | None


class TaskCell(BaseModel):
    passed: int
    counted: int
    errors: int


class TaskRow(BaseModel):
    """Per task: how each cell did on it (keyed by ``cell_id``)."""

    task: str
    domain: str | None
    cells: dict[str, TaskCell] = Field(default_factory=dict)


class Totals(BaseModel):
    n_planned: int
    n_trials: int
    errors: dict[str, int]
    non_model_errors: int
    non_model_error_rate: float | None
    retries: int = 0
    """Attempts run again after an ``infra`` failure, over every cell."""
    retried_trials: int = 0


class MatrixReport(BaseModel):
    """What ``matrix.json`` holds: every cell's statistics and the context needed to read them."""

    title: str
    run_id: str
    run_dir: str
    generated_at: str
    passes: int
    k: int
    pass_threshold: float
    sandbox: str
    verifier: str
    tasks: list[TaskInfo]
    models: list[ModelInfo]
    harnesses: list[HarnessInfo]
    cells: list[CellStats]
    transfer: list[TransferRow]
    task_grid: list[TaskRow]
    totals: Totals
    notices: list[str] = Field(default_factory=list)
    task_load_failures: list[dict[str, str]] = Field(default_factory=list)

    def cell(self, model: str | None, harness: str) -> CellStats | None:
        return next((c for c in self.cells if c.model == model and c.harness == harness), None)


def cell_id(cell: CellStats) -> str:
    """A cell's key in ``task_grid``: ``harness`` or ``harness@model``."""
    return f"{cell.harness}@{cell.model}" if cell.model else cell.harness


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def transfer_rows(cells: list[CellStats], pairs: list[tuple[str, str]]) -> list[TransferRow]:
    rows = []
    harnesses = list(dict.fromkeys(c.harness for c in cells if c.model is not None))
    for base, cand in pairs:
        for h in harnesses:
            b = next((c for c in cells if c.model == base and c.harness == h), None)
            c = next((c for c in cells if c.model == cand and c.harness == h), None)
            if b is None or c is None:
                continue
            gain = _sub(c.pass_at_1, b.pass_at_1)
            spread = (None if b.pass_at_1_std is None or c.pass_at_1_std is None
                      else math.hypot(b.pass_at_1_std, c.pass_at_1_std))
            rows.append(TransferRow(
                harness=h, baseline=base, candidate=cand,
                baseline_pass_at_1=b.pass_at_1, candidate_pass_at_1=c.pass_at_1, gain=gain,
                baseline_pass_at_1_std=b.pass_at_1_std, candidate_pass_at_1_std=c.pass_at_1_std, gain_std=spread,
                beyond_noise=None if gain is None or spread is None else abs(gain) > spread,
                baseline_mean_reward=b.mean_reward, candidate_mean_reward=c.mean_reward,
                reward_gain=_sub(c.mean_reward, b.mean_reward),
            ))
    return rows


def build_report(outcome: Any) -> MatrixReport:
    """Turn a :class:`~tackroom_matrix.runner.MatrixOutcome` into the report data model."""
    config = outcome.config
    cells: list[CellStats] = outcome.cells
    models = []
    for m in config.models:
        status = outcome.endpoints.get(m.label)
        models.append(ModelInfo(label=str(m.label), endpoint=m.endpoint,
                                model=(status.model if status else None) or m.served_name,
                                reachable=status.reachable if status else None,
                                problem=status.problem if status else None))
    grid: dict[str, TaskRow] = {t.id: TaskRow(task=t.id, domain=t.domain) for t in outcome.tasks}
    cell_ids = {(c.model, c.harness): cell_id(c) for c in cells}
    for r in outcome.results:
        key = cell_ids.get((r.model, r.harness))
        row = grid.get(r.task)
        if key is None or row is None or r.pass_index >= config.passes:
            continue
        tc = row.cells.setdefault(key, TaskCell(passed=0, counted=0, errors=0))
        if r.counted:
            tc.counted += 1
            tc.passed += (r.reward or 0.0) >= config.pass_threshold - 1e-9
        else:
            tc.errors += 1
    errors = {c: sum(cell.errors[c] for cell in cells) for c in ERROR_CLASSES}
    planned = sum(c.n_planned for c in cells)
    non_model = errors["infra"] + errors["task"]
    return redacted(MatrixReport(
        title=config.title or "matrix", run_id=outcome.run_dir.name, run_dir=str(outcome.run_dir),
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
        passes=config.passes, k=int(config.k or config.passes), pass_threshold=config.pass_threshold,
        sandbox=config.sandbox.name, verifier=config.verifier.name,
        tasks=[TaskInfo(id=t.id, domain=t.domain, category=t.category) for t in outcome.tasks],
        models=models,
        harnesses=[HarnessInfo(label=r.label, name=r.row.name, needs_policy=r.needs_policy, options=r.row.options)
                   for r in outcome.rows],
        cells=cells,
        transfer=transfer_rows(cells, config.transfer_pairs()),
        task_grid=list(grid.values()),
        totals=Totals(n_planned=planned, n_trials=sum(c.n_trials for c in cells), errors=errors,
                      non_model_errors=non_model, non_model_error_rate=non_model / planned if planned else None,
                      retries=sum(c.retries for c in cells), retried_trials=sum(c.retried_trials for c in cells)),
        notices=list(outcome.notices),
        task_load_failures=[{"path": str(f.path), "message": f.message} for f in outcome.failures],
    ))


def redacted(report: MatrixReport) -> MatrixReport:
    """The report with every credential masked: endpoints' URL userinfo, keys among harness options, keys
    echoed in error messages and notices. Everything printed or written goes through it."""
    return MatrixReport.model_validate(redact(report.model_dump(mode="json")))


# -- plain renderings ------------------------------------------------------------------------
def fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def fmt_pm(value: float | None, std: float | None, digits: int = 3) -> str:
    if value is None:
        return "—"
    return f"{value:.{digits}f} ± {std:.{digits}f}" if std is not None else f"{value:.{digits}f}"


def pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


CSV_FIELDS = ["model", "harness", "harness_name", "status", "n_planned", "n_trials", "n_counted", "n_tasks",
              "pass_at_1", "pass_at_1_std", "k", "pass_at_k", "mean_reward", "std", "errors_infra", "errors_model",
              "errors_task", "non_model_error_rate", "retries", "retried_trials", "mean_trial_sec"]


def to_csv(report: MatrixReport) -> str:
    """One row per cell; behaviour metrics and per-domain pass@1 as extra columns."""
    behaviour = sorted({k for c in report.cells for k in c.behaviour})
    domains = sorted({d for c in report.cells for d in c.domains})
    fields = CSV_FIELDS + [f"behaviour.{b}" for b in behaviour] + [f"domain.{d}.pass_at_1" for d in domains]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for c in report.cells:
        row: dict[str, Any] = {f: getattr(c, f, None) for f in CSV_FIELDS if hasattr(c, f)}
        row.update({f"errors_{k}": v for k, v in c.errors.items()})
        row["model"] = c.model or ""
        row.update({f"behaviour.{k}": v for k, v in c.behaviour.items()})
        row.update({f"domain.{d}.pass_at_1": b.pass_at_1 for d, b in c.domains.items()})
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buf.getvalue()


def terminal_tables(report: MatrixReport) -> list[Table]:
    """The matrix (one line per cell) and, when two models are compared, the transfer view."""
    n = len(report.tasks)
    t = Table(title=f"{report.title}: {n} task{'s' if n != 1 else ''} × {report.passes} "
                    f"pass{'es' if report.passes != 1 else ''} ({report.sandbox} sandbox, {report.verifier} verifier)",
              title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, show_edge=False)
    show_k = report.k != 1  # pass@1 twice says nothing
    cols = [("harness", "left"), ("model", "left"), ("pass@1", "right")]
    cols += [(f"pass@{report.k}", "right")] if show_k else []
    cols += [("reward", "right"), ("trials", "right"), ("i/m/t", "right"), ("non-model", "right"), ("retries", "right")]
    for col, just in cols:
        t.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
    for c in report.cells:
        err = f"{c.errors['infra']}/{c.errors['model']}/{c.errors['task']}"
        rate = pct(c.non_model_error_rate)
        if c.non_model_errors:
            err, rate = f"[red]{err}[/]", f"[red]{rate}[/]"
        model = escape(c.model) if c.model else "[dim]—[/]"
        p1 = "[red]unreachable[/]" if c.status != "ok" else fmt_pm(c.pass_at_1, c.pass_at_1_std, 2)
        pk = [fmt(c.pass_at_k, 2)] if show_k else []
        t.add_row(escape(c.harness), model, p1, *pk, fmt_pm(c.mean_reward, c.std, 2),
                  f"{c.n_trials}/{c.n_planned}", err, rate, f"[yellow]{c.retries}[/]" if c.retries else "0")
    tables = [t]
    if report.transfer:
        tr = Table(title="transfer: the same harness, two models", title_justify="left", box=box.SIMPLE_HEAD,
                   pad_edge=False)
        for col in ("harness", "baseline", "pass@1", "candidate", "pass@1", "gain", "beyond ± std"):
            tr.add_column(col, justify="left" if col in ("harness", "baseline", "candidate") else "right")
        for r in report.transfer:
            gain = "—" if r.gain is None else f"[{'green' if r.gain >= 0 else 'red'}]{r.gain:+.3f}[/]"
            if r.gain is not None and r.gain_std is not None:
                gain += f" ± {r.gain_std:.3f}"
            noise = {True: "yes", False: "no (noise)", None: "—"}[r.beyond_noise]
            tr.add_row(escape(r.harness), escape(r.baseline), fmt_pm(r.baseline_pass_at_1, r.baseline_pass_at_1_std),
                       escape(r.candidate), fmt_pm(r.candidate_pass_at_1, r.candidate_pass_at_1_std), gain, noise)
        tables.append(tr)
    return tables


def print_report(report: MatrixReport, console: Console) -> None:
    for table in terminal_tables(report):
        console.print(table)
    tot = report.totals
    console.print(f"{tot.n_trials}/{tot.n_planned} trials; errors (i/m/t) infra {tot.errors['infra']}, model "
                  f"{tot.errors['model']}, task {tot.errors['task']}; non-model error rate "
                  f"{pct(tot.non_model_error_rate)}; retried attempts {tot.retries} (in {tot.retried_trials} "
                  f"trial{'s' if tot.retried_trials != 1 else ''})", highlight=False)
