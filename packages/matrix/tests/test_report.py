"""matrix.json, matrix.csv, the terminal table, and report.html rendered in headless Chromium."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from rich.console import Console

from tackroom_matrix import build_report, write_reports
from tackroom_matrix.charts import nice_axis
from tackroom_matrix.report import print_report

from .conftest import painted, sample_outcome, screenshot


def test_matrix_json_has_the_promised_fields(tmp_path):
    report = build_report(sample_outcome(tmp_path))
    paths = write_reports(report, tmp_path / "out")
    data = json.loads(paths["matrix.json"].read_text())
    assert len(data["cells"]) == 6
    for cell in data["cells"]:
        assert {"model", "harness", "pass_at_1", "pass_at_k", "mean_reward", "std", "n_trials", "errors",
                "pass_at_1_std", "non_model_error_rate", "domains", "behaviour"} <= set(cell)
    short_sft = next(c for c in data["cells"] if c["harness"] == "chat-short" and c["model"] == "smollm2-sft")
    short = next(c for c in data["cells"] if c["harness"] == "chat-short" and c["model"] == "smollm2")
    gain = next(t for t in data["transfer"] if t["harness"] == "chat-short")
    assert gain["gain"] == pytest.approx(short_sft["pass_at_1"] - short["pass_at_1"])
    spread = (short_sft["pass_at_1_std"] ** 2 + short["pass_at_1_std"] ** 2) ** 0.5
    assert gain["gain_std"] == pytest.approx(spread) and gain["beyond_noise"] == (abs(gain["gain"]) > spread)
    assert {c["model"] for c in data["cells"] if c["harness"] in ("oracle", "nop")} == {None}
    assert data["totals"]["n_trials"] == sum(c["n_trials"] for c in data["cells"])


def test_matrix_csv_has_one_row_per_cell(tmp_path):
    report = build_report(sample_outcome(tmp_path))
    rows = list(csv.DictReader(io.StringIO(write_reports(report, tmp_path)["matrix.csv"].read_text())))
    assert [(r["harness"], r["model"]) for r in rows] == [(c.harness, c.model or "") for c in report.cells]
    oracle = rows[0]
    assert float(oracle["pass_at_1"]) == 1.0 and oracle["errors_infra"] == "0" and oracle["behaviour.turns"] == ""
    assert "domain.finance.pass_at_1" in oracle and "behaviour.tool_call_success_rate" in oracle


def test_terminal_table(tmp_path):
    console = Console(record=True, width=160)
    print_report(build_report(sample_outcome(tmp_path)), console)
    text = console.export_text()
    assert "chat-short" in text and "smollm2-sft" in text and "pass@3" in text
    assert "transfer: the same harness, two models" in text and "+0.589" in text
    report = build_report(sample_outcome(tmp_path / "again"))
    row = next(t for t in report.transfer if t.harness == "chat-short")
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("chat-short") and "+0.589" in ln)
    assert f"+0.589 ± {row.gain_std:.3f}" in line and ("yes" if row.beyond_noise else "no (noise)") in line
    assert "non-model error rate 5.6%" in text


def test_terminal_table_shows_pass_at_1_once_when_k_is_1(tmp_path):
    report = build_report(sample_outcome(tmp_path))
    report.k = 1
    console = Console(record=True, width=160)
    print_report(report, console)
    header = next(line for line in console.export_text().splitlines() if "harness" in line and "pass@" in line)
    assert header.count("pass@1") == 1 and "pass@3" not in header


def test_report_html_is_self_contained(tmp_path):
    html = write_reports(build_report(sample_outcome(tmp_path)), tmp_path)["report.html"].read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html and "<style>" in html
    assert not re.search(r"<script|<link|<img|@import|url\(|src=|href=\"?https?:", html, re.I), \
        "no external assets, no scripts"
    assert "Transfer" in html and "+58.9 pt" in html and "By domain" in html and "Tool-call success" in html
    assert "&lt;script&gt;" not in html


def test_labels_are_escaped(tmp_path):
    outcome = sample_outcome(tmp_path, with_transfer=False)
    outcome.cells[0].harness = "<script>alert(1)</script>"
    html = write_reports(build_report(outcome), tmp_path)["report.html"].read_text()
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_report_html_renders_in_headless_chromium(tmp_path, chromium):
    page = write_reports(build_report(sample_outcome(tmp_path)), tmp_path / "report")["report.html"]
    width, height, rows = screenshot(chromium, page, tmp_path / "report.png", tmp_path)
    assert (width, height) == (1280, 2000)
    colours, share = painted(rows)
    assert colours > 300, f"only {colours} distinct colours: the page rendered (almost) blank"
    assert share > 0.2, f"only {share:.0%} of the page differs from its background"
    # the header band is the dark blue gradient, the body is light
    top = rows[20][3 * 40:3 * 41]
    assert top[2] > top[0] + 40, f"expected the blue header at the top, got RGB {tuple(top)}"


def test_the_blank_check_catches_a_blank_page(tmp_path, chromium):
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body style='background:#f7f8fa'></body></html>")
    _, _, rows = screenshot(chromium, blank, tmp_path / "blank.png", tmp_path, height=600)
    colours, share = painted(rows)
    assert colours < 10 and share < 0.01


@pytest.mark.parametrize("top, axis", [(4.2, (5.0, 5)), (215.2, (250.0, 5)), (1.0, (1.0, 5)), (7.9, (8.0, 4)),
                                       (0.3, (0.3, 3)), (866, (1000.0, 5)), (0.0, (1.0, 4))])
def test_behaviour_axes_end_on_round_numbers(top, axis):
    assert nice_axis(top) == axis


def test_retried_attempts_are_counted_in_every_rendering(tmp_path):
    # A crashed agent binary (SIGBUS at start-up, SIGSEGV mid-run) is infra and retried; the retries show.
    from tackroom import TrialResult
    from tackroom_matrix.stats import cell_stats

    outcome = sample_outcome(tmp_path)
    index = next(i for i, c in enumerate(outcome.cells) if (c.harness, c.model) == ("chat-short", "smollm2"))
    mine = [i for i, r in enumerate(outcome.results) if (r.harness, r.model) == ("chat-short", "smollm2")]
    crash = {"SIGBUS": ("harness_setup", "OpenCodeCrashError"), "SIGSEGV": ("harness_run", "OpenCodeCrashError"),
             "lost": ("sandbox_start", "SandboxError")}
    for i, signals in zip(mine, (["SIGBUS", "SIGSEGV"], ["lost"]), strict=False):
        outcome.results[i] = TrialResult.model_validate({
            **outcome.results[i].model_dump(), "attempt": len(signals) + 1,
            "previous_attempts": [{"attempt": n + 1, "timings": {}, "error": {
                "error_class": "infra", "type": crash[s][1], "phase": crash[s][0], "message": f"killed by {s}"}}
                for n, s in enumerate(signals)]})
    results = [outcome.results[i] for i in mine]
    cell = outcome.cells[index] = cell_stats(results, model="smollm2", harness="chat-short", harness_name="chat-once",
                                             passes=3, k=3, n_planned=len(results))
    assert (cell.retries, cell.retried_trials) == (3, 2)
    assert cell.retry_causes == {"OpenCodeCrashError": 2, "SandboxError": 1}

    report = build_report(outcome)
    assert (report.totals.retries, report.totals.retried_trials) == (3, 2)
    paths = write_reports(report, tmp_path / "out")
    data = json.loads(paths["matrix.json"].read_text())
    assert data["totals"]["retries"] == 3 and data["cells"][index]["retry_causes"]["OpenCodeCrashError"] == 2
    rows = list(csv.DictReader(io.StringIO(paths["matrix.csv"].read_text())))
    assert [r["retries"] for r in rows] == [str(c.retries) for c in report.cells] and rows[index]["retries"] == "3"
    assert rows[index]["retried_trials"] == "2"
    html = paths["report.html"].read_text()
    assert "retried attempts 3" in html and "OpenCodeCrashError × 2" in html
    console = Console(record=True, width=200)
    print_report(report, console)
    text = console.export_text()
    assert "retries" in text and "retried attempts 3 (in 2 trials)" in text
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("chat-short") and "smollm2 " in ln)
    assert line.rstrip().endswith("3")
