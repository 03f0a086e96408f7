"""``tackroom run``: tasks × one harness × one sandbox × one verifier."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any
from datetime import datetime
from pathlib import Path
from statistics import mean

import typer
from rich.table import Table

from tackroom.cli.app import app, console, err_console, fail
from tackroom.config import PluginSelection, RunConfig, instantiate, load_run_config
from tackroom.errors import ConfigError
from tackroom.policy import Policy
from tackroom.task import load_dataset


def build_policy(config: RunConfig) -> Policy | None:
    p = config.policy
    if p.base_url is None:
        return None
    return Policy(base_url=p.base_url, model=p.model, api_key=p.api_key, tokenizer=p.tokenizer,
                  sampling=p.sampling, label=p.label)


async def run_config(config: RunConfig, *, progress: bool = True, run_id: str | None = None):
    """Run a :class:`RunConfig`; returns (run_dir, results, load failures)."""
    from tackroom.runtime import TrialPlugins, TrialRuntime
    from tackroom.trial import Trial

    if not config.tasks:
        raise ConfigError("no tasks given: pass task or dataset directories (or set `tasks` in the config)")
    harness = instantiate("harness", config.harness, where="harness")
    sandbox = instantiate("sandbox", config.sandbox, where="sandbox")
    verifier = instantiate("verifier", config.verifier, where="verifier")
    policy = build_policy(config)
    if "needs_policy" in type(harness).capabilities and policy is None:
        raise ConfigError(f"harness {harness.name!r} calls a model: set [policy] base_url (e.g. `tackroom model up`)")
    dataset = load_dataset(config.tasks, include=config.include or None, exclude=config.exclude or None)
    run_id = run_id or config.runtime.run_id or datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = Path(config.runtime.out) / run_id
    plugins = TrialPlugins.from_instances(harness, sandbox, verifier, policy)
    trials = [
        (Trial(task_id=t.id, task_path=str(t.path), harness=plugins.label, sandbox=sandbox.name,
               verifier=verifier.name, model=policy.display_name if policy else None), t, plugins)
        for t in dataset.tasks
    ]
    runtime = TrialRuntime(
        run_dir, attempts=config.runtime.attempts, concurrency=config.runtime.concurrency,
        teardown_timeout_sec=config.runtime.teardown_timeout_sec,
        retry_backoff_sec=config.runtime.retry_backoff_sec, progress=progress, console=err_console,
        executor=config.runtime.executor, executor_options=config.runtime.ray,
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(config.model_dump_json(indent=2))
    async with policy_routing(config, type(harness), plugins):
        results = await runtime.run_all(trials)
    return run_dir, results, dataset.failures


def wants_gateway(config: RunConfig, harness_cls: type) -> bool:
    """Chat-only harnesses go through the policy gateway (exact tokens) unless ``[policy] gateway = false``."""
    if config.policy.base_url is None:
        return False
    if config.policy.gateway is not None:
        return config.policy.gateway
    return "chat" in harness_cls.capabilities


@contextlib.asynccontextmanager
async def policy_routing(config: RunConfig, harness_cls: type, plugins: Any) -> AsyncIterator[None]:
    """Start one policy gateway for the run when the harness needs it, and route each trial through a session."""
    if not wants_gateway(config, harness_cls):
        yield
        return
    from tackroom.gateway.engine_client import EngineSettings
    from tackroom.gateway.server import GatewaySettings, PolicyGateway
    from tackroom.gateway.trial_sessions import GatewaySessions

    p = config.policy
    settings = GatewaySettings(
        engine=EngineSettings(base_url=p.base_url, model=None if p.model == "default" else p.model, api_key=p.api_key),
        tokenizer=p.tokenizer or "smollm2",
    )
    async with PolicyGateway(settings) as gateway:
        plugins.policy_for = GatewaySessions(gateway, sampling=p.sampling, label=p.label)
        yield


@app.command("run")
def run(
    sources: list[str] = typer.Argument(None, help="Task directories or dataset directories (directories of tasks)."),
    config_file: Path = typer.Option(None, "--config", "-c", help="A run config TOML; flags override it."),
    harness: str = typer.Option(None, "--harness", help="Harness name (default: oracle)."),
    sandbox: str = typer.Option(None, "--sandbox", help="Sandbox name (default: local)."),
    verifier: str = typer.Option(None, "--verifier", help="Verifier name (default: test-script)."),
    attempts: int = typer.Option(None, "--attempts", help="Attempts per trial for infra failures."),
    concurrency: int = typer.Option(None, "--concurrency", help="Trials at once."),
    executor: str = typer.Option(None, "--executor", help="Where trials run: asyncio (in-process, default) or ray."),
    out: str = typer.Option(None, "--out", help="Runs directory (default: runs)."),
    run_id: str = typer.Option(None, "--run-id", help="Resume (or name) a run: finished trials are reused."),
    include: list[str] = typer.Option(None, "--include", help="Only task ids matching these patterns."),
    exclude: list[str] = typer.Option(None, "--exclude", help="Skip task ids matching these patterns."),
    base_url: str = typer.Option(None, "--base-url", help="Model endpoint (OpenAI-compatible, ends in /v1)."),
    model: str = typer.Option(None, "--model", help="Model name at that endpoint."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """Run tasks through a harness, sandbox and verifier; write results to a run directory."""
    config = load_run_config(config_file) if config_file else RunConfig()
    if sources:
        config.tasks = [str(Path(s).resolve()) for s in sources]
    # A flag naming the plugin the config already selects keeps the config's options for it.
    if harness and harness != config.harness.name:
        config.harness = PluginSelection(name=harness)
    if sandbox and sandbox != config.sandbox.name:
        config.sandbox = PluginSelection(name=sandbox)
    if verifier and verifier != config.verifier.name:
        config.verifier = PluginSelection(name=verifier)
    for field, value in (("attempts", attempts), ("concurrency", concurrency), ("out", out), ("executor", executor)):
        if value is not None:
            setattr(config.runtime, field, value)
    if include:
        config.include = include
    if exclude:
        config.exclude = exclude
    if base_url:
        config.policy.base_url = base_url
    if model:
        config.policy.model = model
    run_dir, results, failures = asyncio.run(run_config(config, progress=not as_json, run_id=run_id))
    scored = [r.reward if r.reward is not None else 0.0 for r in results if r.counted]
    summary = {
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
        "task_load_failures": [f.model_dump(mode="json") for f in failures],
    }
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        table = Table(title=f"run {run_dir}")
        for col in ("task", "reward", "error", "time (s)"):
            table.add_column(col)
        for r in results:
            err = f"[red]{r.error.error_class}[/]: {r.error.type}" if r.error else ""
            table.add_row(r.task, "-" if r.reward is None else f"{r.reward:.3f}", err, f"{r.timings.get('total', 0):.1f}")
        console.print(table)
        for f in failures:
            err_console.print(f"[yellow]skipped task[/] {f.path}: {f.message}")
        mr = summary["mean_reward"]
        console.print(f"mean reward {mr:.3f} over {len(scored)} counted trials; errors {summary['errors']}"
                      if mr is not None else f"no counted trials; errors {summary['errors']}")
    if not results and failures:
        raise fail("every task failed to load")
