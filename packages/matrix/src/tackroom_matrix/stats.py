"""Statistics of one matrix cell (model × harness row) from its trial results.

Conventions (also in README.md beside this file):

- A trial *counts* unless it failed with an ``infra`` or ``task`` error (those
  are the machinery's or the task's fault and say nothing about the model). A
  ``model`` error counts, with the reward the verifier gave (0 when nothing was
  left to grade).
- A counted trial *passes* when its reward ≥ ``pass_threshold``.
- pass@1 is computed per pass (the share of tasks passed in pass *p*), then
  averaged over passes; its std is the sample standard deviation across passes.
  Mean reward and its std work the same way.
- pass@k uses the unbiased estimator of Chen et al. (2021),
  ``1 − C(n−c, k) / C(n, k)`` per task with *n* counted passes of which *c*
  passed, averaged over tasks with n ≥ k.
- The non-model error rate is (infra + task errors) / planned trials: the
  number to drive to ~0 before training on a task set.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from math import comb, isnan
from statistics import fmean, stdev

from pydantic import BaseModel, Field

from tackroom import TrialResult

ERROR_CLASSES = ("infra", "model", "task")

RATIO_METRICS: dict[str, tuple[str, str]] = {
    "assistant_tokens_per_turn": ("assistant_tokens", "turns"),
    "tool_call_success_rate": ("tool_call_successes", "tool_calls"),
    "code_execution_share": ("code_executions", "tool_calls"),
}
"""Behaviour metrics derived as ratio of sums when a harness reports the raw counts (numerator, denominator)."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task: ``n`` samples, ``c`` of them correct (Chen et al., 2021)."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n samples, got n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def _mean(values: Sequence[float]) -> float | None:
    return fmean(values) if values else None


def _std(values: Sequence[float]) -> float | None:
    return stdev(values) if len(values) >= 2 else None


class Breakdown(BaseModel):
    """pass@1 and mean reward of one domain or category within a cell."""

    n_trials: int
    n_tasks: int
    pass_at_1: float | None
    mean_reward: float | None


class ErrorSample(BaseModel):
    """One error type seen in a cell: how often, of which class, and one message."""

    error_class: str
    type: str
    count: int
    phase: str
    message: str


class CellStats(BaseModel):
    """Everything the reports show about one (model, harness row) cell."""

    model: str | None
    harness: str
    harness_name: str
    status: str = "ok"
    """``ok``, or ``unreachable`` when the model endpoint could not be reached (nothing ran)."""
    status_detail: str | None = None
    n_planned: int
    n_trials: int
    n_counted: int
    n_tasks: int
    passes_seen: int
    pass_at_1: float | None
    pass_at_1_std: float | None
    k: int
    pass_at_k: float | None
    pass_at: dict[str, float | None] = Field(default_factory=dict)
    """pass@j for j = 1 … passes, keyed by str(j)."""
    mean_reward: float | None
    std: float | None
    """Std of the mean reward across passes."""
    errors: dict[str, int]
    error_types: list[ErrorSample] = Field(default_factory=list)
    non_model_errors: int
    non_model_error_rate: float | None
    domains: dict[str, Breakdown] = Field(default_factory=dict)
    categories: dict[str, Breakdown] = Field(default_factory=dict)
    behaviour: dict[str, float] = Field(default_factory=dict)
    behaviour_trials: int = 0
    """How many trials reported behaviour metrics (a harness cancelled at its timeout reports none)."""
    mean_trial_sec: float | None = None
    retries: int = 0
    """Attempts run again after an ``infra`` failure (a crashed agent binary, a lost sandbox), over all trials."""
    retried_trials: int = 0
    """Trials that needed more than one attempt."""
    retry_causes: dict[str, int] = Field(default_factory=dict)
    """Why attempts were retried: the failed attempt's error type, counted."""


def _passed(r: TrialResult, threshold: float) -> bool:
    return r.counted and (r.reward or 0.0) >= threshold - 1e-9


def _breakdown(results: list[TrialResult], key: str, passes: int, threshold: float) -> dict[str, Breakdown]:
    groups: dict[str, list[TrialResult]] = defaultdict(list)
    for r in results:
        groups[getattr(r, key) or "(none)"].append(r)
    out = {}
    for name in sorted(groups):
        rs = groups[name]
        p1, _ = _per_pass(rs, passes, lambda r: 1.0 if _passed(r, threshold) else 0.0)
        mr, _ = _per_pass(rs, passes, lambda r: r.reward or 0.0)
        out[name] = Breakdown(n_trials=len(rs), n_tasks=len({r.task for r in rs}), pass_at_1=p1, mean_reward=mr)
    return out


def _per_pass(results: Iterable[TrialResult], passes: int, value) -> tuple[float | None, float | None]:
    """Mean over passes of the per-pass mean of ``value`` over counted trials; std across passes."""
    by_pass: dict[int, list[float]] = defaultdict(list)
    for r in results:
        if r.counted and r.pass_index < passes:
            by_pass[r.pass_index].append(value(r))
    per_pass = [fmean(v) for _, v in sorted(by_pass.items()) if v]
    return _mean(per_pass), _std(per_pass)


def behaviour(results: Iterable[TrialResult]) -> dict[str, float]:
    """Mean of every metric the harness reported, over the trials that report it; plus derived ratios."""
    sums: dict[str, float] = defaultdict(float)
    counts: Counter[str] = Counter()
    for r in results:
        for name, value in r.metrics.items():
            if isinstance(value, (int, float)) and not isnan(value):
                sums[name] += float(value)
                counts[name] += 1
    out = {name: sums[name] / counts[name] for name in sorted(sums)}
    for name, (num, den) in RATIO_METRICS.items():
        if name not in out and num in sums and sums.get(den):
            out[name] = sums[num] / sums[den]
    return dict(sorted(out.items()))


def cell_stats(results: Sequence[TrialResult], *, model: str | None, harness: str, harness_name: str,
               passes: int, k: int, n_planned: int, pass_threshold: float = 1.0,
               status: str = "ok", status_detail: str | None = None) -> CellStats:
    """Compute a cell's statistics from its trial results (see the module docstring for the definitions)."""
    counted = [r for r in results if r.counted]
    errors = {c: 0 for c in ERROR_CLASSES}
    samples: dict[tuple[str, str], ErrorSample] = {}
    for r in results:
        if r.error is None:
            continue
        errors[r.error.error_class] += 1
        key = (r.error.error_class, r.error.type)
        if key in samples:
            samples[key].count += 1
        else:
            samples[key] = ErrorSample(error_class=r.error.error_class, type=r.error.type, count=1,
                                       phase=r.error.phase, message=r.error.message[:500])
    not_run = max(0, n_planned - len(results)) if status == "unreachable" else 0
    if not_run:
        errors["infra"] += not_run
        samples[("infra", "EndpointUnreachableError")] = ErrorSample(
            error_class="infra", type="EndpointUnreachableError", count=not_run, phase="preflight",
            message=status_detail or "model endpoint unreachable")
    non_model = errors["infra"] + errors["task"]
    planned = max(n_planned, len(results))
    causes: Counter[str] = Counter(a.error.type for r in results for a in r.previous_attempts if a.error is not None)

    per_task: dict[str, list[bool]] = defaultdict(list)
    for r in counted:
        if r.pass_index < passes:
            per_task[r.task].append(_passed(r, pass_threshold))
    pass_at: dict[str, float | None] = {}
    for j in range(1, passes + 1):
        vals = [pass_at_k(len(v), sum(v), j) for v in per_task.values() if len(v) >= j]
        pass_at[str(j)] = _mean(vals)

    p1, p1_std = _per_pass(results, passes, lambda r: 1.0 if _passed(r, pass_threshold) else 0.0)
    mr, mr_std = _per_pass(results, passes, lambda r: r.reward or 0.0)
    totals = [r.timings["total"] for r in results if "total" in r.timings]
    return CellStats(
        model=model, harness=harness, harness_name=harness_name, status=status, status_detail=status_detail,
        n_planned=planned, n_trials=len(results), n_counted=len(counted),
        n_tasks=len({r.task for r in results}), passes_seen=len({r.pass_index for r in results}),
        pass_at_1=p1, pass_at_1_std=p1_std, k=k, pass_at_k=pass_at.get(str(k)), pass_at=pass_at,
        mean_reward=mr, std=mr_std, errors=errors,
        error_types=sorted(samples.values(), key=lambda s: (-s.count, s.type)),
        non_model_errors=non_model, non_model_error_rate=(non_model / planned) if planned else None,
        domains=_breakdown(counted, "domain", passes, pass_threshold),
        categories=_breakdown(counted, "category", passes, pass_threshold),
        behaviour=behaviour(results), behaviour_trials=sum(1 for r in results if r.metrics),
        mean_trial_sec=_mean(totals),
        retries=sum(len(r.previous_attempts) for r in results),
        retried_trials=sum(1 for r in results if r.previous_attempts),
        retry_causes=dict(causes.most_common()),
    )
