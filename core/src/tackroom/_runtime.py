"""The trial runtime: runs trials into a run directory, each attempt planned here (:class:`AttemptPlan`) and run by
an executor; :mod:`tackroom._attempt` holds its phases and the one place that picks a trial's error. ``infra``
failures are retried with backoff, ``model`` ones count (what the agent left is graded), ``task`` ones are final.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from inspect import signature
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from tenacity import AsyncRetrying, retry_if_result, stop_after_attempt, wait_exponential

from tackroom._attempt import AttemptDeadlines, AttemptPlan, PluginRef, error_info
from tackroom._config import NetworkDefaults
from tackroom._errors import ConfigError
from tackroom._executor import Executor
from tackroom._harness import Harness
from tackroom._manager import PluginManager, get_plugin_manager
from tackroom._policy import Policy, redact
from tackroom._policy_session import PolicySessions
from tackroom._resolve import make_executor
from tackroom._sandbox import SandboxProvider
from tackroom._task import Task
from tackroom._trajectory import Trajectory
from tackroom._trial import AttemptRecord, Trial, TrialResult
from tackroom._verifier import Verifier

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrialOutcome:
    """A finished trial: its result and its trajectory (as written to disk)."""

    result: TrialResult
    trajectory: Trajectory


@dataclass
class TrialPlugins:
    """What a trial runs with. Harness and verifier are built fresh per attempt (they may keep state)."""

    harness_cls: type[Harness]
    harness_options: Any
    sandbox: SandboxProvider
    verifier_cls: type[Verifier]
    verifier_options: Any
    policy: Policy | None = None
    harness_label: str | None = None
    policy_for: PolicySessions | None = None
    """Optional: a :class:`~tackroom._policy_session.PolicySession` per attempt (a gateway session), whose policy
    the harness is given and whose verdict on the engine decides a failed harness run."""

    @classmethod
    def from_instances(cls, harness: Harness, sandbox: SandboxProvider, verifier: Verifier,
                       policy: Policy | None = None, harness_label: str | None = None) -> TrialPlugins:
        return cls(type(harness), harness.options, sandbox, type(verifier), verifier.options, policy, harness_label)

    @property
    def label(self) -> str:
        return self.harness_label or self.harness_cls.name


def atomic_write(path: Path, data: Any) -> None:
    """``data`` as JSON at ``path``, written to a temporary file first so a reader never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
    tmp.replace(path)


class TrialRuntime:
    """Runs trials into a run directory (``<out>/<run-id>/<trial-id>/{result,trajectory}.json``)."""

    def __init__(
        self,
        run_dir: str | Path,
        *,
        attempts: int = 3,
        concurrency: int = 4,
        prepare_ahead: int = 0,
        setup_timeout_sec: float = 600.0,
        start_timeout_sec: float = 120.0,
        teardown_timeout_sec: float = 60.0,
        retry_backoff_sec: float = 1.0,
        manager: PluginManager | None = None,
        progress: bool = True,
        console: Console | None = None,
        executor: str | Executor = "asyncio",
        executor_options: Any = None,
        network: NetworkDefaults | None = None,
        force_build: bool = False,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.attempts = attempts
        self.concurrency = concurrency
        self.deadlines = AttemptDeadlines(setup_timeout_sec=setup_timeout_sec, start_timeout_sec=start_timeout_sec,
                                          teardown_timeout_sec=teardown_timeout_sec)
        self.retry_backoff_sec = retry_backoff_sec
        self.manager = manager or get_plugin_manager()
        self.progress = progress
        self.console = console or Console(stderr=True)
        self.executor = make_executor(executor, executor_options)
        """Where attempts run: a registered executor (``asyncio``, in-process; ``ray`` from tackroom-ray)."""
        if prepare_ahead and not (self.executor.prepares_ahead and "turn" in signature(self.executor.run).parameters):
            raise ConfigError(f"the {self.executor.name!r} executor cannot hold prepared trials at their turn "
                              f"(prepare_ahead = {prepare_ahead}): set prepare_ahead = 0, or executor = \"asyncio\"")
        self.prepare_ahead = prepare_ahead
        """Trials started and set up beyond ``concurrency``, waiting for a turn (:meth:`Attempt.take_turn`)."""
        self._turns: asyncio.Semaphore | None = None
        self.network = network or NetworkDefaults()
        """Each phase's network for tasks that declare none (``[runtime] network``)."""
        self.force_build = force_build

    # -- one attempt ----------------------------------------------------------------
    def plan(self, trial: Trial, task: Task, plugins: TrialPlugins, attempt: int,
             policy: Policy | None = None) -> AttemptPlan:
        """What one attempt of ``trial`` runs: plugins by reference (the live objects ride along in this process)."""
        return AttemptPlan(
            trial=trial, task=task, attempt=attempt, deadlines=self.deadlines, policy=policy or plugins.policy,
            network=self.network, force_build=self.force_build,
            harness=PluginRef.of(plugins.harness_cls, plugins.harness_options),
            sandbox=PluginRef.of(type(plugins.sandbox), plugins.sandbox.options, plugins.sandbox),
            verifier=PluginRef.of(plugins.verifier_cls, plugins.verifier_options),
        )

    async def run_attempt(self, trial: Trial, task: Task, plugins: TrialPlugins, attempt: int,
                          policy: Policy | None = None) -> tuple[TrialResult, Trajectory]:
        """Run one attempt end to end on the executor, with its lifecycle hooks; never raises (but on cancellation)."""
        announced = False

        def started() -> None:
            nonlocal announced
            if not announced:
                announced = True
                self._notify("tackroom_trial_started", trial=trial)

        turn = {"turn": self._turns} if self._turns is not None else {}
        result, trajectory = await self.executor.run(self.plan(trial, task, plugins, attempt, policy),
                                                     manager=self.manager, on_started=started, **turn)
        started()  # an attempt that failed before it began (a lost worker) is still reported as one
        self._notify("tackroom_trial_finished", trial=trial, result=result)
        return result, trajectory

    def _notify(self, hook: str, **kwargs: Any) -> None:
        try:
            getattr(self.manager.hook, hook)(**kwargs)
        except Exception:  # observers never break a trial
            log.exception("%s hook raised", hook)

    # -- one trial, retried -----------------------------------------------------------
    async def run_trial(self, trial: Trial, task: Task, plugins: TrialPlugins) -> TrialResult:
        """Run a trial, retrying ``infra`` failures with exponential backoff; write its files."""
        return (await self.run_trial_outcome(trial, task, plugins)).result

    async def run_trial_outcome(self, trial: Trial, task: Task, plugins: TrialPlugins) -> TrialOutcome:
        """:meth:`run_trial`, returning the trajectory (as written, secrets masked) beside the result."""
        history: list[AttemptRecord] = []
        final: tuple[TrialResult, Trajectory] | None = None
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential(multiplier=self.retry_backoff_sec, max=60),
            retry=retry_if_result(lambda r: r[0].error_class == "infra"),
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
        ):
            with attempt:
                if final is not None:
                    history.append(AttemptRecord(attempt=final[0].attempt, error=final[0].error, timings=final[0].timings))
                number = attempt.retry_state.attempt_number
                final = await self._attempt_with_policy(trial, task, plugins, number)
            if not attempt.retry_state.outcome.failed:
                attempt.retry_state.set_result(final)
        assert final is not None
        result, trajectory = final
        result.previous_attempts = history
        out = self.run_dir / trial.id
        # A key an endpoint echoed back (say in a 400's message) must not reach disk either.
        written = redact(trajectory.model_dump(mode="json"))
        atomic_write(out / "trajectory.json", written)
        atomic_write(out / "result.json", result.dump())
        return TrialOutcome(result, Trajectory.model_validate(written))

    async def _attempt_with_policy(self, trial: Trial, task: Task, plugins: TrialPlugins,
                                   attempt: int) -> tuple[TrialResult, Trajectory]:
        if plugins.policy_for is None:
            return await self.run_attempt(trial, task, plugins, attempt)
        async with plugins.policy_for(trial) as session:
            result, trajectory = await self.run_attempt(trial, task, plugins, attempt, policy=session.policy)
            run_failed = result.error is not None and result.error.phase == "harness_run"
            if run_failed:
                await session.settle()  # e.g. one last engine liveness probe: a silent engine is infra at any timeout
            engine_error = session.error()
            if engine_error is not None and run_failed:
                # The engine's own classification (down → infra, context exceeded → model) decides.
                result.error = error_info(engine_error, "harness_run", engine_error.error_class or "infra")
                if result.error.error_class != "model":
                    result.reward = None
            elif result.error is None:
                # A harness that swallowed the engine's failure and returned normally: the episode was cut
                # short by the machinery, so its reward says nothing about the policy.
                cut = session.unrecovered_error()
                if cut is not None and cut.error_class == "infra":
                    result.error = error_info(cut, "harness_run", "infra")
                    result.reward = None
            return result, await session.complete(trajectory)

    # -- many trials ------------------------------------------------------------------
    def finished(self, trial: Trial) -> TrialResult | None:
        """A finished result of an earlier run of this trial (``infra`` failures are re-run)."""
        path = self.run_dir / trial.id / "result.json"
        try:
            result = TrialResult.model_validate_json(path.read_text())
        except (OSError, ValueError):
            return None
        return None if result.error_class == "infra" else result

    async def run_all(self, items: Iterable[tuple[Trial, Task, TrialPlugins]],
                      on_result: Callable[[TrialResult], None] | None = None) -> list[TrialResult]:
        """Run trials concurrently (at most ``concurrency`` at once), resuming finished ones."""
        return [outcome.result for outcome in await self.run_outcomes(items, on_result)]

    async def run_outcomes(self, items: Iterable[tuple[Trial, Task, TrialPlugins]],
                           on_result: Callable[[TrialResult], None] | None = None) -> list[TrialOutcome]:
        """:meth:`run_all` with each trial's trajectory beside its result (a trainer reads no file back)."""
        items = list(items)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        results: dict[str, TrialOutcome] = {}
        todo = []
        for trial, task, plugins in items:
            done = self.finished(trial)
            if done is not None:
                results[trial.id] = TrialOutcome(done, self._written_trajectory(trial))
            else:
                todo.append((trial, task, plugins))
        if todo:
            await self.executor.start([self.plan(trial, task, plugins, 1) for trial, task, plugins in todo])
        in_flight = self.executor.max_in_flight(self.concurrency)
        self._turns = asyncio.Semaphore(in_flight) if self.prepare_ahead else None
        semaphore = asyncio.Semaphore(in_flight + self.prepare_ahead)

        with Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"), console=self.console, disable=not self.progress, transient=False,
        ) as progress:
            bar = progress.add_task("trials", total=len(items), completed=len(results), status=f"{len(results)} resumed")
            errors = 0

            async def one(trial: Trial, task: Task, plugins: TrialPlugins) -> None:
                nonlocal errors
                async with semaphore:
                    outcome = await self.run_trial_outcome(trial, task, plugins)
                results[trial.id] = outcome
                result = outcome.result
                errors += result.error is not None and result.error.error_class != "model"
                progress.update(bar, advance=1, status=f"{errors} errors" if errors else "")
                if on_result is not None:
                    on_result(result)

            await asyncio.gather(*(one(*item) for item in todo))
        return [results[trial.id] for trial, _, _ in items]

    def _written_trajectory(self, trial: Trial) -> Trajectory:
        path = self.run_dir / trial.id / "trajectory.json"
        try:
            return Trajectory.model_validate_json(path.read_text())
        except (OSError, ValueError):
            return Trajectory(stop_reason="missing")
