"""``tackroom matrix``: the cross-harness evaluation matrix."""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer

from tackroom.cli.app import app, console, err_console


@app.command("matrix")
def matrix(
    config_file: Path = typer.Argument(..., help="A matrix config TOML (see examples/matrix/demo.toml)."),
    out: str = typer.Option(None, "--out", help="Runs directory (default: the config's runtime.out, else runs)."),
    run_id: str = typer.Option(None, "--run-id", help="Run name (default: matrix-<config name>); re-running resumes it."),
    as_json: bool = typer.Option(False, "--json", help="Print matrix.json on stdout instead of the table."),
    require_models: bool = typer.Option(False, "--require-models",
                                        help="Stop at once when a model endpoint is unreachable."),
    concurrency: int = typer.Option(None, "--concurrency", help="Trials at once (overrides runtime.concurrency)."),
) -> None:
    """Run every (model, harness, task, pass) trial and write matrix.json, matrix.csv and report.html."""
    from tackroom.matrix import build_report, load_matrix_config, run_matrix, write_reports
    from tackroom.matrix.report import print_report

    config = load_matrix_config(config_file)
    if require_models:
        config.require_models = True
    if concurrency is not None:
        config.runtime.concurrency = max(1, concurrency)
    outcome = asyncio.run(run_matrix(config, progress=not as_json, console=err_console, run_id=run_id, out=out))
    report = build_report(outcome)
    paths = write_reports(report, outcome.run_dir)
    if as_json:
        typer.echo(paths["matrix.json"].read_text(encoding="utf-8"))
        return
    print_report(report, console)
    console.print(f"report: [bold]{paths['report.html']}[/]  (data: matrix.json, matrix.csv beside it)",
                  highlight=False, soft_wrap=True)
