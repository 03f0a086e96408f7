"""A batch's runner: its plugins, its :class:`tackroom_app.TrialRuntime` (the attempts, backoff, executor and
network of its ``[runtime]``, as ``tackroom run`` builds them) and its policy routing (the gateway a chat-only
harness reaches its model through). Opened when the batch's first rollout starts, closed when it has none left.

A rollout's trial runs through :meth:`TrialRuntime.run_trial_outcome`: ``infra`` failures are retried within it
with backoff (``runtime.attempts``); what it returns is the rollout's attempt. Its files go to
``<folder>/runs/<batch id>/<trial id>/`` as a run's do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tackroom import ConfigError, Task, TaskError, TrialResult, load_task
from tackroom_app import PluginManager, RunConfig, TrialRuntime, policy_routing
from tackroom_serve.db.store import Claimed, Finished
from tackroom_serve.plan import BatchPlugins, build_plugins

log = logging.getLogger("tackroom.serve")

LOST_SECRETS = ("the batch's config held credentials, which the service never writes to disk, and the service has "
                "restarted since: create the batch again (name the key with policy.api_key_env to survive restarts)")


@runtime_checkable
class WeightUpdates(Protocol):
    """What a policy gateway offers for a weight update (tackroom-gateway's ``PolicyGateway`` does): its model calls
    held (``pause``) and let go on a new version (``resume``). The ``tackroom_policy_gateway`` hook promises only
    trial sessions: a gateway without these drains its model calls whatever the pause asks."""

    policy_version: int | None

    async def pause(self, mode: str = "finish") -> Any: ...

    def resume(self, policy_version: int | None = None) -> Any: ...


def finished_from(result: TrialResult, trajectory: dict[str, Any]) -> Finished:
    """A trial's outcome as the rollout's attempt: ``completed`` when it counts (no error, or the model's own)."""
    return Finished(
        state="completed" if result.counted else "failed", reward=result.reward, error_class=result.error_class,
        error=result.error.model_dump(mode="json", by_alias=True) if result.error else None,
        notes=list(result.notes), result=result.dump(), trajectory=trajectory)


def service_failure(exc: BaseException, error_class: str = "infra", phase: str = "service") -> Finished:
    """An attempt that ended outside the trial runtime (the task unreadable, a bug): no reward."""
    return Finished(state="failed", error_class=error_class, error={
        "class": error_class, "type": type(exc).__name__, "phase": phase, "message": str(exc) or type(exc).__name__},
        notes=[], result={}, trajectory={})


class BatchRunner:
    """Runs one batch's rollouts; see the module docstring."""

    def __init__(self, batch_id: str, built: BatchPlugins, runtime: TrialRuntime,
                 stack: contextlib.AsyncExitStack, gateway: Any = None) -> None:
        self.batch_id = batch_id
        self.built = built
        self.runtime = runtime
        self._stack = stack
        self.gateway: WeightUpdates | None = gateway if isinstance(gateway, WeightUpdates) else None
        """The policy gateway its trials reach the model through, when it can hold their model calls for a weight
        update; None where the harness calls the engine itself (or the gateway cannot)."""

    @classmethod
    async def open(cls, batch_id: str, config: RunConfig, folder: Path,
                   manager: PluginManager | None = None) -> BatchRunner:
        built = build_plugins(config, manager)
        rt = config.runtime
        runtime = TrialRuntime(
            folder / "runs" / batch_id, attempts=rt.attempts, concurrency=rt.concurrency,
            teardown_timeout_sec=rt.teardown_timeout_sec, retry_backoff_sec=rt.retry_backoff_sec, manager=manager,
            progress=False, executor=rt.executor, executor_options=rt.executor_options(), network=rt.network,
            force_build=rt.force_build)
        stack = contextlib.AsyncExitStack()
        try:
            gateway = await stack.enter_async_context(policy_routing(config.policy, type(built.harness),
                                                                     built.trial_plugins, manager=manager))
            await runtime.executor.start([])
        except BaseException:
            await stack.aclose()
            raise
        return cls(batch_id, built, runtime, stack, gateway)

    def max_in_flight(self, concurrency: int) -> int:
        return self.runtime.executor.max_in_flight(concurrency)

    async def run(self, claimed: Claimed) -> Finished:
        """Run the rollout's trial to its outcome (cancellation propagates: the attempt tears its sandbox down)."""
        try:
            task: Task = await asyncio.to_thread(load_task, claimed.task_path, claimed.task_id)
        except TaskError as exc:
            return service_failure(exc, "task", "task_load")
        if str(task.source_hash) != claimed.task_hash:
            changed = TaskError(f"{claimed.task_path} changed since the batch was created (its content hash "
                                f"differs): its results would not be the task's the batch named")
            return service_failure(changed, "task", "task_load")
        if self.gateway is not None and claimed.policy_version is not None and self.gateway.policy_version is None:
            self.gateway.resume(claimed.policy_version)  # the gateway tags its tokens with the batch's version
        trial = self.built.trial(task, claimed.sample)
        outcome = await self.runtime.run_trial_outcome(trial, task, self.built.trial_plugins)
        return finished_from(outcome.result, outcome.trajectory.model_dump(mode="json"))

    async def close(self) -> None:
        try:
            await self._stack.aclose()
        except Exception:  # a gateway that fails to stop must not keep the next batch from running
            log.exception("closing batch %s's runner", self.batch_id)


class Runners:
    """The open runners, by batch; configs holding credentials are kept here in memory only."""

    def __init__(self, folder: Path, manager: PluginManager | None = None) -> None:
        self.folder = folder
        self.manager = manager
        self.configs: dict[str, RunConfig] = {}
        self.open: dict[str, BatchRunner] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def get(self, batch_id: str, stored: tuple[dict[str, Any], bool]) -> BatchRunner:
        """The batch's runner, opened from ``stored`` (its config as written, and whether it held credentials)
        unless this process keeps the config given at creation."""
        if batch_id in self.open:
            return self.open[batch_id]
        async with self._locks.setdefault(batch_id, asyncio.Lock()):
            if batch_id not in self.open:
                config = self.configs.get(batch_id)
                if config is None:
                    data, had_secrets = stored
                    if had_secrets:
                        raise ConfigError(LOST_SECRETS)
                    config = RunConfig.model_validate(data)
                self.open[batch_id] = await BatchRunner.open(batch_id, config, self.folder, self.manager)
        return self.open[batch_id]

    async def close(self, batch_id: str) -> None:
        runner = self.open.pop(batch_id, None)
        if runner is not None:
            await runner.close()

    async def close_all(self) -> None:
        for batch_id in list(self.open):
            await self.close(batch_id)
