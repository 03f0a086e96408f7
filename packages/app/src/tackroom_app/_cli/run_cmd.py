"""``tackroom run``: tasks × one harness × one sandbox × one verifier, from flags (the run itself:
``tackroom_app._run``, which says when a run resumes)."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from tackroom._config import PluginSelection, RunConfig, with_overrides
from tackroom._errors import ConfigError
from tackroom._policy import redact
from tackroom_app._cli.app import app, console, err_console, fail
from tackroom_app._cli.sandbox_cmd import parse_options
from tackroom_app._command import run_to_completion
from tackroom_app._resolve import load_run_config, resolve_run_config
from tackroom_app._run import run_config

RUN_FLAGS = {
    "runtime.attempts": "--attempts", "runtime.concurrency": "--concurrency", "runtime.out": "--out",
    "runtime.prepare_ahead": "--prepare-ahead",
    "runtime.executor": "--executor", "runtime.run_id": "--run-id", "include": "--include", "exclude": "--exclude",
    "policy.base_url": "--base-url", "policy.model": "--model", "harness": "--harness/--harness-option",
    "sandbox": "--sandbox", "verifier": "--verifier", "tasks": "SOURCES", "runtime.network": "--allow-internet",
    "runtime.force_build": "--force-build",
}


@app.command("run")
def run(
    sources: list[str] = typer.Argument(None, help="Task directories or dataset directories (directories of tasks)."),
    config_file: Path = typer.Option(None, "--config", "-c", help="A run config TOML; flags override it."),
    harness: str = typer.Option(None, "--harness", help="Harness name (default: oracle)."),
    harness_options: list[str] = typer.Option(None, "--harness-option", "-O", help="A harness option KEY=VALUE "
                                              "(VALUE read as JSON, else as text), as in [harness]; repeatable."),
    sandbox: str = typer.Option(None, "--sandbox", help="Sandbox name (default: local)."),
    verifier: str = typer.Option(None, "--verifier", help="Verifier name (default: test-script)."),
    attempts: int = typer.Option(None, "--attempts", help="Attempts per trial for infra failures (>= 1)."),
    concurrency: int = typer.Option(None, "--concurrency", help="Trials at once (>= 1)."),
    prepare_ahead: int = typer.Option(None, "--prepare-ahead", help="Trials started and set up beyond --concurrency "
                                      "while others run, each waiting for a turn (>= 0)."),
    executor: str = typer.Option(None, "--executor", help="Where trials run: asyncio (in-process, default), "
                                 "ray (tackroom-ray) or another registered executor."),
    out: str = typer.Option(None, "--out", help="Runs directory (default: runs)."),
    run_id: str = typer.Option(None, "--run-id", help="Resume (or name) a run: finished trials are reused when "
                               "the setup is the same. A plain name."),
    force_new: bool = typer.Option(False, "--force-new", help="Never resume: when --run-id names a run that exists, "
                                   "start a new one beside it (<run-id>-<time>-<random>)."),
    include: list[str] = typer.Option(None, "--include", help="Only task ids matching these patterns."),
    exclude: list[str] = typer.Option(None, "--exclude", help="Skip task ids matching these patterns."),
    base_url: str = typer.Option(None, "--base-url", help="Model endpoint (OpenAI-compatible, ends in /v1)."),
    model: str = typer.Option(None, "--model", help="Model name at that endpoint."),
    allow_internet: bool = typer.Option(False, "--allow-internet", help="Give tasks that declare no network the "
                                        "internet in both phases (Harbor's default); a task's own network_mode wins."),
    force_build: bool = typer.Option(False, "--force-build", help="Build each task's environment/ even when its "
                                     "task.toml names a docker_image."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """Run tasks through a harness, sandbox and verifier; write results to a run directory."""
    config = load_run_config(config_file) if config_file else RunConfig()
    overrides: dict[str, Any] = {}
    # A flag naming the plugin the config already selects keeps the config's options for it.
    for field, value in (("harness", harness), ("sandbox", sandbox), ("verifier", verifier)):
        if value and value != getattr(config, field).name:
            overrides[field] = PluginSelection(name=value).model_dump()
    for field, value in (("attempts", attempts), ("concurrency", concurrency), ("prepare_ahead", prepare_ahead),
                         ("out", out), ("executor", executor), ("run_id", run_id)):
        if value is not None:
            overrides[f"runtime.{field}"] = value
    try:
        options = parse_options(harness_options or [], "--harness-option")
        overrides.update({f"harness.{k}": v for k, v in options.items()})
    except ConfigError as exc:
        raise fail(str(exc)) from None
    for path, value in (("tasks", [str(Path(s).resolve()) for s in sources or []]),
                        ("include", include), ("exclude", exclude), ("policy.base_url", base_url),
                        ("policy.model", model), ("runtime.network", allow_internet and "public"),
                        ("runtime.force_build", force_build)):
        if value:  # an empty or false flag leaves the config's value
            overrides[path] = value
    config = with_overrides(config, overrides, source=str(config_file or "run config"), flags=RUN_FLAGS)
    config = resolve_run_config(config, source=str(config_file or "run config"), flags=RUN_FLAGS)
    run_dir, results, failures = run_to_completion(run_config(config, progress=not as_json, force_new=force_new))
    scored = [r.reward if r.reward is not None else 0.0 for r in results if r.counted]
    summary = redact({
        "run_dir": str(run_dir),
        "trials": [
            {"trial_id": r.trial_id, "task": r.task, "harness": r.harness, "sandbox": r.sandbox,
             "verifier": r.verifier, "model": r.model, "reward": r.reward, "components": r.components,
             "error": r.error.model_dump(by_alias=True) if r.error else None, "attempt": r.attempt,
             "timings": r.timings, "notes": r.notes}
            for r in results
        ],
        "mean_reward": mean(scored) if scored else None,
        "errors": {c: sum(1 for r in results if r.error_class == c) for c in ("infra", "model", "task")},
        "retried_attempts": sum(len(r.previous_attempts) for r in results),
        "task_load_failures": [f.model_dump(mode="json") for f in failures],
    })
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        table = Table("task", "reward", "error", "time (s)", title=f"run {escape(str(run_dir))}")
        for r in results:
            err = (f"[red]{r.error.error_class}[/]: {escape(r.error.type)}" if r.error else "") + "".join(
                f" [yellow](attempt {a.attempt}: {escape(a.error.type)})[/]" for a in r.previous_attempts if a.error)
            table.add_row(escape(r.task), "-" if r.reward is None else f"{r.reward:.3f}", err,
                          f"{r.timings.get('total', 0):.1f}")
        console.print(table)
        for f in summary["task_load_failures"]:
            err_console.print(f"[yellow]skipped task[/] {escape(f['path'])}: {escape(f['message'])}")
        mr = summary["mean_reward"]
        counted = f"mean reward {mr:.3f} over {len(scored)} counted trials" if mr is not None else "no counted trials"
        console.print(counted + f"; errors {summary['errors']}; retried attempts {summary['retried_attempts']}")
    if not results and failures:
        raise fail("every task failed to load")
