"""A run of one :class:`RunConfig`: tasks × one harness × one sandbox × one verifier, into a run directory.

``<out>/<run-id>/`` holds a folder per trial and ``run.json``: the config (credentials masked) and its
fingerprint (each task's content hash, the plugins and their options, the model). An existing run resumes only
when the fingerprint matches (new tasks may join); otherwise it is refused with what changed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tackroom._config import NetworkDefaults, RunConfig, with_overrides
from tackroom._errors import ConfigError
from tackroom._policy import Policy, redact, redact_url
from tackroom._runtime import TrialPlugins, TrialRuntime, atomic_write
from tackroom._task import load_dataset
from tackroom._trial import Trial
from tackroom_app._policy_routing import check_gateway_installed, policy_routing, wants_gateway
from tackroom_app._refusals import refuse_unrunnable
from tackroom_app._resolve import instantiate, resolve_run_config
from tackroom_app._run_dirs import (
    claim_run_dir,
    fingerprint_changes,
    has_results,
    refuse_changed,
    tasks_fingerprint,
    unique_trials,
    validated_run_id,
)

RUN_FILE = "run.json"
FINGERPRINT_VERSION = 1


def build_policy(config: RunConfig) -> Policy | None:
    return config.policy.policy() if config.policy.configured else None


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
        # Only a network other than the default is recorded: runs made before the key resume as they were.
        **({"network": config.runtime.network.model_dump(mode="json")}
           if config.runtime.network != NetworkDefaults() else {}),
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
    atomic_write(run_dir / RUN_FILE, record)


# -- running ---------------------------------------------------------------------------------------
async def run_config(config: RunConfig, *, progress: bool = True, run_id: str | None = None,
                     force_new: bool = False):
    """Run a :class:`RunConfig` the way ``tackroom run`` does (fingerprint checked, resume, policy routing);
    returns (run_dir, results, load failures). Progress goes to stderr."""
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
    refuse_unrunnable(dataset, sandbox, config.runtime.network)
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
        prepare_ahead=config.runtime.prepare_ahead, teardown_timeout_sec=config.runtime.teardown_timeout_sec,
        retry_backoff_sec=config.runtime.retry_backoff_sec, progress=progress,
        executor=config.runtime.executor, executor_options=config.runtime.executor_options(),
        network=config.runtime.network, force_build=config.runtime.force_build,
    )
    async with policy_routing(config.policy, type(harness), plugins):
        results = await runtime.run_all(trials)
    return run_dir, results, dataset.failures
