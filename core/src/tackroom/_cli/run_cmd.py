"""``tackroom run``: tasks × one harness × one sandbox × one verifier.

A run directory (``<out>/<run-id>/``) holds one folder per trial and ``run.json``:
the run's config (credentials masked) and its **fingerprint** — every task's
content hash, the harness/sandbox/verifier names and options, the model. Naming
an existing run (``--run-id``) resumes it only when the fingerprint matches (new
tasks may join); anything else is refused with what changed, and
``--force-new`` starts a new run beside it instead. Generated run ids carry a
random suffix, so two runs started in the same second never share a folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from tackroom._cli.app import app, console, err_console, fail
from tackroom._config import PluginSelection, RunConfig, with_overrides
from tackroom._errors import ConfigError
from tackroom._policy import Policy, redact, redact_url
from tackroom._policy_routing import check_gateway_installed, policy_routing, wants_gateway
from tackroom._resolve import instantiate, load_run_config, resolve_run_config
from tackroom._run_dirs import (
    claim_run_dir,
    fingerprint_changes,
    has_results,
    refuse_changed,
    tasks_fingerprint,
    unique_trials,
    validated_run_id,
)
from tackroom._task import load_dataset
from tackroom.app import run_to_completion

RUN_FILE = "run.json"
FINGERPRINT_VERSION = 1


def build_policy(config: RunConfig) -> Policy | None:
    return config.policy.policy() if config.policy.configured else None


# -- run directories -----------------------------------------------------------------------------
# -- fingerprints --------------------------------------------------------------------------------
def options_fingerprint(plugin: Any) -> dict[str, Any]:
    """A plugin's validated options, credentials masked (a rotated key is not a different setup)."""
    options = getattr(plugin, "options", None)
    dumped = options.model_dump(mode="json") if hasattr(options, "model_dump") else dict(options or {})
    return redact(dumped)


def run_fingerprint(config: RunConfig, harness: Any, sandbox: Any, verifier: Any, label: str, policy: Policy | None,
                    tasks: list[Any], gateway: bool) -> dict[str, Any]:
    """What produced a run's results: a resume must match it."""
    return {
        "version": FINGERPRINT_VERSION,
        "harness": {"name": harness.name, "label": label, "options": options_fingerprint(harness)},
        "sandbox": {"name": sandbox.name, "options": options_fingerprint(sandbox)},
        "verifier": {"name": verifier.name, "options": options_fingerprint(verifier)},
        "policy": None if policy is None else redact({
            "base_url": redact_url(policy.base_url), "model": policy.model, "label": policy.label,
            "tokenizer": policy.tokenizer, "sampling": policy.sampling, "token_ids": policy.token_ids,
            "gateway": gateway}),
        "tasks": tasks_fingerprint(tasks),
    }


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check_and_record(run_dir: Path, config: RunConfig, fingerprint: dict[str, Any]) -> None:
    """Refuse to resume ``run_dir`` when its results were made with another setup; then write run.json."""
    previous = read_json(run_dir / RUN_FILE)
    old = (previous or {}).get("fingerprint")
    if has_results(run_dir):
        if not isinstance(old, dict):
            raise refuse_changed(run_dir, ["it has no fingerprint (made by an older tackroom, or run.json is "
                                           "missing or unreadable), so its results cannot be checked"])
        problems = fingerprint_changes(old, fingerprint)
        if problems:
            raise refuse_changed(run_dir, problems)
        fingerprint = {**fingerprint, "tasks": {**(old.get("tasks") or {}), **fingerprint["tasks"]}}
    record = {**redact(config.model_dump(mode="json")), "run_id": run_dir.name, "fingerprint": fingerprint}
    tmp = run_dir / f".{RUN_FILE}.tmp"
    tmp.write_text(json.dumps(record, indent=2, ensure_ascii=False), encoding="utf-8")
    tmp.replace(run_dir / RUN_FILE)


# -- running ---------------------------------------------------------------------------------------
async def run_config(config: RunConfig, *, progress: bool = True, run_id: str | None = None,
                     force_new: bool = False):
    """Run a :class:`RunConfig`; returns (run_dir, results, load failures)."""
    from tackroom._runtime import TrialPlugins, TrialRuntime
    from tackroom._trial import Trial

    config = with_overrides(config, {}, source="run config")  # values set in code get the file's checks too
    config = resolve_run_config(config, source="run config")
    if run_id is not None:
        validated_run_id(run_id)
    if not config.tasks:
        raise ConfigError("no tasks given: pass task or dataset directories (or set `tasks` in the config)")
    harness = instantiate("harness", config.harness, where="harness")
    sandbox = instantiate("sandbox", config.sandbox, where="sandbox")
    verifier = instantiate("verifier", config.verifier, where="verifier")
    policy = build_policy(config)
    if "needs_policy" in type(harness).capabilities and policy is None:
        raise ConfigError(f"harness {harness.name!r} calls a model: set [policy] base_url (e.g. `tackroom model up`)")
    dataset = load_dataset(config.tasks, include=config.include or None, exclude=config.exclude or None)
    plugins = TrialPlugins.from_instances(harness, sandbox, verifier, policy)
    trials = [
        (Trial.for_task(t, harness=plugins.label, sandbox=sandbox.name, verifier=verifier.name,
                        model=policy.display_name if policy else None), t, plugins)
        for t in dataset.tasks
    ]
    unique_trials([t for t, _, _ in trials])
    fingerprint = run_fingerprint(config, harness, sandbox, verifier, plugins.label, policy, dataset.tasks,
                                  wants_gateway(config.policy, type(harness)))
    check_gateway_installed(config.policy, type(harness))
    run_dir = claim_run_dir(config.runtime.out, run_id or config.runtime.run_id, force_new=force_new)
    check_and_record(run_dir, config, fingerprint)
    runtime = TrialRuntime(
        run_dir, attempts=config.runtime.attempts, concurrency=config.runtime.concurrency,
        teardown_timeout_sec=config.runtime.teardown_timeout_sec,
        retry_backoff_sec=config.runtime.retry_backoff_sec, progress=progress, console=err_console,
        executor=config.runtime.executor, executor_options=config.runtime.executor_options(),
    )
    async with policy_routing(config.policy, type(harness), plugins):
        results = await runtime.run_all(trials)
    return run_dir, results, dataset.failures


RUN_FLAGS = {
    "runtime.attempts": "--attempts", "runtime.concurrency": "--concurrency", "runtime.out": "--out",
    "runtime.executor": "--executor", "runtime.run_id": "--run-id", "include": "--include", "exclude": "--exclude",
    "policy.base_url": "--base-url", "policy.model": "--model", "harness": "--harness", "sandbox": "--sandbox",
    "verifier": "--verifier", "tasks": "SOURCES",
}


@app.command("run")
def run(
    sources: list[str] = typer.Argument(None, help="Task directories or dataset directories (directories of tasks)."),
    config_file: Path = typer.Option(None, "--config", "-c", help="A run config TOML; flags override it."),
    harness: str = typer.Option(None, "--harness", help="Harness name (default: oracle)."),
    sandbox: str = typer.Option(None, "--sandbox", help="Sandbox name (default: local)."),
    verifier: str = typer.Option(None, "--verifier", help="Verifier name (default: test-script)."),
    attempts: int = typer.Option(None, "--attempts", help="Attempts per trial for infra failures (>= 1)."),
    concurrency: int = typer.Option(None, "--concurrency", help="Trials at once (>= 1)."),
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
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """Run tasks through a harness, sandbox and verifier; write results to a run directory."""
    config = load_run_config(config_file) if config_file else RunConfig()
    overrides: dict[str, Any] = {}
    if sources:
        overrides["tasks"] = [str(Path(s).resolve()) for s in sources]
    # A flag naming the plugin the config already selects keeps the config's options for it.
    for field, value in (("harness", harness), ("sandbox", sandbox), ("verifier", verifier)):
        if value and value != getattr(config, field).name:
            overrides[field] = PluginSelection(name=value).model_dump()
    for field, value in (("attempts", attempts), ("concurrency", concurrency), ("out", out), ("executor", executor),
                         ("run_id", run_id)):
        if value is not None:
            overrides[f"runtime.{field}"] = value
    if include:
        overrides["include"] = include
    if exclude:
        overrides["exclude"] = exclude
    if base_url:
        overrides["policy.base_url"] = base_url
    if model:
        overrides["policy.model"] = model
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
        "task_load_failures": [f.model_dump(mode="json") for f in failures],
    })
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
    else:
        table = Table(title=f"run {escape(str(run_dir))}")
        for col in ("task", "reward", "error", "time (s)"):
            table.add_column(col)
        for r in results:
            err = f"[red]{r.error.error_class}[/]: {escape(r.error.type)}" if r.error else ""
            table.add_row(escape(r.task), "-" if r.reward is None else f"{r.reward:.3f}", err,
                          f"{r.timings.get('total', 0):.1f}")
        console.print(table)
        for f in summary["task_load_failures"]:
            err_console.print(f"[yellow]skipped task[/] {escape(f['path'])}: {escape(f['message'])}")
        mr = summary["mean_reward"]
        console.print(f"mean reward {mr:.3f} over {len(scored)} counted trials; errors {summary['errors']}"
                      if mr is not None else f"no counted trials; errors {summary['errors']}")
    if not results and failures:
        raise fail("every task failed to load")
