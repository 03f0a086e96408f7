"""From a create request to the batch the store writes, and the plugins a batch runs with.

A batch's config is a ``tackroom run`` config (:class:`tackroom_app.RunConfig`), checked the way ``tackroom run``
checks it (names resolved, plugin options validated, tasks loaded, what the sandbox cannot run refused) before
anything is written; a rollout is one (task, sample), whose trial id is the one ``tackroom run`` gives that task's
pass ``sample``.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tackroom import ConfigError, Policy, Task, Trial
from tackroom.services import redact
from tackroom_app import (
    PluginManager,
    RunConfig,
    TrialPlugins,
    get_plugin_manager,
    instantiate,
    load_dataset,
    refuse_unrunnable,
    resolve_runtime,
    unique_trials,
    wants_gateway,
)
from tackroom_serve.db.store import NewBatch, NewRollout
from tackroom_serve.models import BatchCreate, plain_json

MAX_ROLLOUTS = 100_000
"""Rollouts one batch may hold (tasks × samples)."""
SERVICE_OWNS = ("out", "run_id")


@dataclass
class BatchPlugins:
    """A batch's plugins, built from its config as ``tackroom run`` builds them."""

    harness: Any
    sandbox: Any
    verifier: Any
    policy: Policy | None
    trial_plugins: TrialPlugins

    def trial(self, task: Task, sample: int) -> Trial:
        return Trial.for_task(task, harness=self.trial_plugins.label, sandbox=self.sandbox.name,
                              verifier=self.verifier.name, model=self.policy.display_name if self.policy else None,
                              pass_index=sample)


def build_plugins(config: RunConfig, manager: PluginManager | None = None) -> BatchPlugins:
    """Instantiate the config's harness, sandbox and verifier (a wrong name or option is a :class:`ConfigError`
    that lists what exists) and its policy."""
    manager = manager or get_plugin_manager()
    harness = instantiate("harness", config.harness, where="config.harness", manager=manager)
    sandbox = instantiate("sandbox", config.sandbox, where="config.sandbox", manager=manager)
    verifier = instantiate("verifier", config.verifier, where="config.verifier", manager=manager)
    policy = config.policy.policy() if config.policy.configured else None
    if "needs_policy" in type(harness).capabilities and policy is None:
        raise ConfigError(f"config.harness: {harness.name!r} calls a model: set config.policy.base_url")
    if (policy is not None and wants_gateway(config.policy, type(harness), manager)
            and not manager.hook.tackroom_policy_gateway.get_hookimpls()):
        raise ConfigError("config.policy.gateway: exact token ids need the policy gateway, and tackroom-gateway is "
                          "not installed where the service runs (pip install ./packages/gateway)")
    return BatchPlugins(harness, sandbox, verifier, policy,
                        TrialPlugins.from_instances(harness, sandbox, verifier, policy))


def checked_config(config: RunConfig, tasks_root: Path, manager: PluginManager | None = None) -> RunConfig:
    """The request's config with task paths resolved against ``tasks_root`` and its ``[runtime]`` checked; what
    the service decides itself (where files go, prepare-ahead) is refused when given."""
    defaults = type(config.runtime)()
    problems = [f"config.runtime.{name}: the service keeps each batch's files in its own folder; leave it out"
                for name in SERVICE_OWNS if getattr(config.runtime, name) != getattr(defaults, name)]
    if config.runtime.prepare_ahead:
        problems.append("config.runtime.prepare_ahead: the service does not prepare trials ahead yet; leave it at 0")
    if not config.tasks:
        problems.append("config.tasks: no tasks given (task or dataset directories)")
    if problems:
        raise ConfigError("\n".join(problems))
    resolve_runtime(config.runtime, where="config.runtime", manager=manager)
    tasks = [t if Path(t).is_absolute() else str((tasks_root / t).resolve()) for t in config.tasks]
    return config.model_copy(update={"tasks": tasks})


def request_hash(data: Any) -> str:
    """What a repeated idempotency key is compared by: the request body, canonical JSON."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def plan_batch(request: BatchCreate, *, client: str, key: str | None, digest: str, tasks_root: Path,
               manager: PluginManager | None = None) -> tuple[NewBatch, RunConfig]:
    """The batch to write, and its config as given (credentials and all, for the runner to keep in memory)."""
    config = checked_config(request.config, tasks_root, manager)
    built = build_plugins(config, manager)
    dataset = load_dataset(config.tasks, include=config.include or None, exclude=config.exclude or None)
    refuse_unrunnable(dataset, built.sandbox, config.runtime.network)
    failures = [{"path": str(f.path), "message": f.message} for f in dataset.failures]
    if not dataset.tasks:
        raise ConfigError("config.tasks: no task could be loaded: "
                          + "; ".join(f"{f['path']}: {f['message']}" for f in failures))
    if len(dataset.tasks) * request.samples > MAX_ROLLOUTS:
        raise ConfigError(f"samples: {len(dataset.tasks)} tasks × {request.samples} samples is more than "
                          f"{MAX_ROLLOUTS:,} rollouts in one batch; split it")
    trials = [(task, s, built.trial(task, s)) for task in dataset.tasks for s in range(request.samples)]
    unique_trials([t for _, _, t in trials], where="config.tasks")
    revealed = plain_json(config)
    stored = redact(revealed)
    batch = NewBatch(
        id=f"b-{secrets.token_hex(6)}", client=client, idempotency_key=key, request_hash=digest,
        policy_version=request.policy_version, samples=request.samples, concurrency=config.runtime.concurrency,
        config=stored, secrets_in_memory=stored != revealed, metadata=request.metadata, task_load_failures=failures,
        rollouts=[NewRollout(task_id=task.id, task_path=str(task.path), task_hash=str(task.source_hash),
                             trial_id=trial.id, sample=s) for task, s, trial in trials])
    return batch, config
