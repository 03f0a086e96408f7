"""The matrix's report as files: ``matrix.json`` (the :class:`~tackroom_matrix.report.MatrixReport`), ``matrix.csv``
(one row per cell) and ``report.html`` (:mod:`tackroom_matrix.html`), all redacted."""

from __future__ import annotations

from pathlib import Path

from tackroom_matrix.html import render_html
from tackroom_matrix.report import MatrixReport, redacted, to_csv

REPORT_FILES = ("matrix.json", "matrix.csv", "report.html")


def write_reports(report: MatrixReport, directory: str | Path) -> dict[str, Path]:
    """Write matrix.json, matrix.csv and report.html into ``directory``; returns their paths."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    report = redacted(report)
    paths = {name: d / name for name in REPORT_FILES}
    paths["matrix.json"].write_text(report.model_dump_json(indent=2), encoding="utf-8")
    paths["matrix.csv"].write_text(to_csv(report), encoding="utf-8")
    paths["report.html"].write_text(render_html(report), encoding="utf-8")
    return paths
