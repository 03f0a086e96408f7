"""``tackroom matrix CONFIG.toml``: the cross-harness evaluation matrix (added through the ``tackroom_commands`` hook)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer


def matrix(
    config_file: Path = typer.Argument(..., help="A matrix config TOML (see examples/matrix/demo.toml)."),
    out: str = typer.Option(None, "--out", help="Runs directory (default: the config's runtime.out, else runs)."),
    run_id: str = typer.Option(None, "--run-id", help="Run name (default: matrix-<config name>); re-running resumes it."),
    as_json: bool = typer.Option(False, "--json", help="Print matrix.json on stdout instead of the table."),
    require_models: bool = typer.Option(False, "--require-models",
                                        help="Stop at once when a model endpoint is unreachable."),
    concurrency: int = typer.Option(None, "--concurrency", help="Trials at once, >= 1 (overrides runtime.concurrency)."),
    prepare_ahead: int = typer.Option(None, "--prepare-ahead", help="Trials started and set up beyond --concurrency "
                                      "while others run, >= 0 (overrides runtime.prepare_ahead)."),
    force_new: bool = typer.Option(False, "--force-new", help="Never resume: when the run folder already holds a "
                                   "run, start a new one beside it (<run-id>-<time>-<random>)."),
    allow_internet: bool = typer.Option(False, "--allow-internet", help="Give tasks that declare no network the "
                                        "internet in both phases (overrides runtime.network)."),
    force_build: bool = typer.Option(False, "--force-build", help="Build each task's environment/ even when its "
                                     "task.toml names a docker_image."),
) -> None:
    """Run every (model, harness, task, pass) trial and write matrix.json, matrix.csv and report.html."""
    from tackroom_app import command_console, run_to_completion, with_overrides
    from tackroom_matrix.config import load_matrix_config
    from tackroom_matrix.report import build_report, print_report
    from tackroom_matrix.report_files import write_reports
    from tackroom_matrix.runner import run_matrix

    console, err_console = command_console(), command_console(stderr=True)
    config = load_matrix_config(config_file)
    overrides: dict[str, Any] = {}
    if require_models:
        overrides["require_models"] = True
    if concurrency is not None:
        overrides["runtime.concurrency"] = concurrency
    if prepare_ahead is not None:
        overrides["runtime.prepare_ahead"] = prepare_ahead
    if out is not None:
        overrides["runtime.out"] = out
    if run_id is not None:
        overrides["runtime.run_id"] = run_id
    if allow_internet:
        overrides["runtime.network"] = "public"
    if force_build:
        overrides["runtime.force_build"] = True
    # the flags get the checks the file's values get (--concurrency 0 or --run-id ../x are refused, not clamped)
    config = with_overrides(config, overrides, source=str(config_file), flags={
        "runtime.concurrency": "--concurrency", "runtime.prepare_ahead": "--prepare-ahead", "runtime.out": "--out",
        "runtime.run_id": "--run-id", "require_models": "--require-models", "runtime.network": "--allow-internet",
        "runtime.force_build": "--force-build"})
    outcome = run_to_completion(run_matrix(config, progress=not as_json, console=err_console, force_new=force_new))
    report = build_report(outcome)
    paths = write_reports(report, outcome.run_dir)
    if as_json:
        typer.echo(paths["matrix.json"].read_text(encoding="utf-8"))
        return
    print_report(report, console)
    console.print(f"report: [bold]{paths['report.html']}[/]  (data: matrix.json, matrix.csv beside it)",
                  highlight=False, soft_wrap=True)


def add_matrix_command(app: Any) -> None:
    app.command("matrix")(matrix)
