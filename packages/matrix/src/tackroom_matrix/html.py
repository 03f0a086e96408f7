"""report.html: one self-contained page (inline CSS and SVG, no scripts, no network) from a :class:`MatrixReport`."""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from jinja2 import Environment, StrictUndefined, select_autoescape
from markupsafe import Markup

from tackroom import __version__
from tackroom_matrix.charts import Bar, colour, grouped_hbars, hbars, nice_axis, transfer_chart
from tackroom_matrix.report import MatrixReport, cell_id, fmt, fmt_pm, pct
from tackroom_matrix.stats import RATIO_METRICS, CellStats

BEHAVIOUR_ORDER = ["turns", "assistant_tokens_per_turn", "tool_call_success_rate", "code_execution_share"]
BEHAVIOUR_TITLES = {
    "turns": "Turns per trial",
    "assistant_tokens_per_turn": "Assistant tokens per turn",
    "tool_call_success_rate": "Tool-call success",
    "code_execution_share": "Code-execution share of tool calls",
}


def _is_share(name: str) -> bool:
    return name.endswith(("_rate", "_share", "_success", "_fraction"))


def heat(value: float | None) -> str:
    """Background for a pass@1 value: soft red (0) through amber to soft green (1)."""
    if value is None:
        return "#f5f7fa"
    hue = 4 + 128 * max(0.0, min(1.0, value))
    return f"hsl({hue:.0f}, 62%, 90%)"


def _cell_name(c: CellStats) -> str:
    return f"{c.harness} · {c.model}" if c.model else c.harness


def _context(report: MatrixReport) -> dict[str, Any]:
    cells = report.cells
    colours = {cell_id(c): colour(i) for i, c in enumerate(cells)}
    model_cols = list(dict.fromkeys(c.model for c in cells if c.model))
    rows = []
    for h in report.harnesses:
        row_cells = [c for c in cells if c.harness == h.label]
        if not row_cells:
            continue
        if h.needs_policy:
            slots = [next((c for c in row_cells if c.model == m), None) for m in model_cols]
            rows.append({"harness": h, "reference": False, "slots": slots})
        else:
            rows.append({"harness": h, "reference": True, "slots": row_cells[:1]})

    pass_chart = hbars([Bar(_cell_name(c), c.pass_at_1, colours[cell_id(c)], std=c.pass_at_1_std,
                            marker=c.pass_at_k if report.k > 1 else None,
                            note=None if c.status == "ok" else "endpoint unreachable") for c in cells],
                       marker_name=f"pass@{report.k}", width=500)
    reward_chart = hbars([Bar(_cell_name(c), c.mean_reward, colours[cell_id(c)], std=c.std,
                              note=None if c.status == "ok" else "endpoint unreachable") for c in cells],
                         width=500)

    def breakdown(attr: str) -> str:
        names = sorted({d for c in cells for d in getattr(c, attr)})
        groups = []
        for name in names:
            bars = []
            for c in cells:
                b = getattr(c, attr).get(name)
                if b is not None:
                    bars.append(Bar(_cell_name(c), b.pass_at_1, colours[cell_id(c)],
                                    note=f"{fmt(b.pass_at_1, 2)} · {b.n_tasks} task{'s' if b.n_tasks != 1 else ''}"))
            if bars:
                groups.append((name, bars))
        return grouped_hbars(groups, width=500) if groups else ""

    domains = breakdown("domains")
    same = all(sorted(c.domains) == sorted(c.categories) for c in cells)
    categories = "" if same else breakdown("categories")

    all_metrics = sorted({m for c in cells for m in c.behaviour},
                         key=lambda m: (BEHAVIOUR_ORDER.index(m) if m in BEHAVIOUR_ORDER else 99, m))
    # Raw counts behind a derived ratio (tool_calls behind tool_call_success_rate …) go to the table only.
    inputs = {part for name, parts in RATIO_METRICS.items() if name in all_metrics for part in parts} - {"turns"}
    measured = [c for c in cells if c.behaviour]
    behaviour = []
    charted = [m for m in all_metrics if m in BEHAVIOUR_ORDER]
    charted += [m for m in all_metrics if m not in BEHAVIOUR_ORDER and m not in inputs][:max(0, 4 - len(charted))]
    for m in charted:
        share = _is_share(m)
        top = max((v for c in measured if (v := c.behaviour.get(m)) is not None), default=0.0)
        scale, intervals = (1.0, 4) if share else nice_axis(top)
        chart = hbars([Bar(_cell_name(c), c.behaviour.get(m), colours[cell_id(c)],
                           note=(pct(c.behaviour.get(m)) if share else fmt(c.behaviour.get(m), 1)))
                       for c in measured], scale=scale, width=500, percent_axis=share, intervals=intervals)
        behaviour.append({"name": m, "title": BEHAVIOUR_TITLES.get(m, m.replace("_", " ")), "chart": Markup(chart)})

    transfers = []
    pairs = list(dict.fromkeys((r.baseline, r.candidate) for r in report.transfer))
    for base, cand in pairs:
        rs = [r for r in report.transfer if r.baseline == base and r.candidate == cand]
        gains = [r.gain for r in rs if r.gain is not None]
        transfers.append({
            "baseline": base, "candidate": cand, "rows": rs,
            "mean_gain": sum(gains) / len(gains) if gains else None,
            "chart": Markup(transfer_chart([(r.harness, r.baseline_pass_at_1, r.candidate_pass_at_1) for r in rs],
                                           baseline=base, candidate=cand, width=1000)),
        })

    ok = [c for c in cells if c.pass_at_1 is not None]
    best = max(ok, key=lambda c: c.pass_at_1 or 0.0) if ok else None
    reference = [r for r in rows if not r["reference"]]
    return {
        "r": report, "rows": rows, "model_cols": model_cols, "has_model_rows": bool(reference),
        "colours": colours, "cell_id": cell_id, "cell_name": _cell_name,
        "pass_chart": Markup(pass_chart), "reward_chart": Markup(reward_chart),
        "domains_chart": Markup(domains), "categories_chart": Markup(categories),
        "behaviour": behaviour, "transfers": transfers, "best": best,
        "fmt": fmt, "fmt_pm": fmt_pm, "is_share": _is_share, "pct": pct, "heat": heat, "version": __version__,
        "error_cells": [c for c in cells if any(c.errors.values())],
        "grid_cells": cells,
        # per-tool breakdowns (`tool_calls/files_read`, …) stay in matrix.json / matrix.csv: one column each is too many
        "metric_table": {"names": [m for m in all_metrics if "/" not in m], "cells": measured,
                         "hidden": sum("/" in m for m in all_metrics)},
    }


def render_html(report: MatrixReport) -> str:
    """The whole page as one string."""
    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True), undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(files("tackroom_matrix").joinpath("report.html.j2").read_text(encoding="utf-8"))
    return template.render(**_context(report))
