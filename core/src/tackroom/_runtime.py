"""The trial runtime: sandbox start → harness setup → harness run → verify → teardown, with retries.

Every phase has a timeout; teardown always runs (also on cancellation) and is
itself time-limited. Failures are classified by the ``tackroom_classify_error``
hook (then by built-in rules) into ``infra`` (retried with backoff), ``model``
(counts: the verifier still grades what the agent left, as Harbor does after an
agent timeout) and ``task`` (not retried).

Between the agent's turn and grading, every process in the sandbox is killed and
confirmed gone (``Sandbox.kill_processes``), so nothing the agent started can
change what is graded. A reward outside the task's ``reward_range`` (default
[0, 1]) or not finite is a ``task`` error.

When more than one thing fails, the trial's ``error`` is decided in this order:
``task`` > ``infra`` > ``model``. A model failure in the agent's turn (say an agent
timeout) followed by a task or infra failure while grading keeps the later one as
``error`` (the reward cannot be trusted) and the agent's in ``other_errors``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from tenacity import AsyncRetrying, retry_if_result, stop_after_attempt, wait_exponential

from tackroom._errors import ErrorClass, ModelError, TackroomError
from tackroom._harness import Harness
from tackroom._manager import PluginManager, get_plugin_manager
from tackroom._policy import Policy, redact
from tackroom._sandbox import SandboxProvider, SandboxSpec
from tackroom._task import Task
from tackroom._trajectory import Trajectory
from tackroom._trial import AttemptRecord, Trial, TrialErrorInfo, TrialResult, slug
from tackroom._verifier import Verifier
from tackroom.executors import Executor, make_executor

log = logging.getLogger(__name__)

ERROR_CLASSES: tuple[ErrorClass, ...] = ("infra", "model", "task")
KILL_TIMEOUT_SEC = 30.0
VERIFY_GRACE_SEC = 120.0
"""Beyond the task's verifier timeout: uploading the tests and reading the reward around ``test.sh``."""
"""How long a sandbox gets to kill and confirm gone every process the agent started."""


class AgentTimeoutError(ModelError, TimeoutError):
    """The harness ran past the task's agent timeout."""


class PhaseTimeoutError(TackroomError, TimeoutError):
    """A runtime phase other than the agent run ran past its limit."""

    error_class = "infra"


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
    policy_for: Callable[[Trial], Any] | None = None
    """Optional async context factory giving a per-trial Policy (e.g. a gateway session)."""

    @classmethod
    def from_instances(cls, harness: Harness, sandbox: SandboxProvider, verifier: Verifier,
                       policy: Policy | None = None, harness_label: str | None = None) -> TrialPlugins:
        return cls(type(harness), harness.options, sandbox, type(verifier), verifier.options, policy, harness_label)

    @property
    def label(self) -> str:
        return self.harness_label or self.harness_cls.name


def classify(error: BaseException, phase: str, manager: PluginManager) -> ErrorClass:
    """Plugins first (``tackroom_classify_error``), then the built-in rules."""
    try:
        answer = manager.hook.tackroom_classify_error(error=error, phase=phase)
    except Exception:  # a broken classifier must not break the trial
        log.exception("tackroom_classify_error raised; using the built-in rules")
        answer = None
    if answer in ERROR_CLASSES:
        return answer
    own = getattr(error, "error_class", None)
    if own in ERROR_CLASSES:
        return own
    if phase == "harness_run" and isinstance(error, TimeoutError):
        return "model"
    return "infra"


def sandbox_spec(task: Task, name: str) -> SandboxSpec:
    """The sandbox a trial of ``task`` gets.

    A harness with the ``agent_in_sandbox`` capability (e.g. OpenCode) gets the same
    sandbox: it reaches the policy through :meth:`Sandbox.forward_host_port`, one host
    port and nothing else, never through the host's network.
    """
    env = task.config.environment
    return SandboxSpec(
        name=name,
        environment_dir=task.environment_dir if task.environment_dir.is_dir() else None,
        image=env.docker_image,
        cpus=env.cpus,
        memory_mb=env.memory_mb,
        allow_internet=env.allow_internet,
        build_timeout_sec=env.build_timeout_sec,
        labels={"tackroom._task": slug(task.id)},
    )


def _atomic_write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False))
    tmp.replace(path)


class TrialRuntime:
    """Runs trials into a run directory (``<out>/<run-id>/<trial-id>/{result,trajectory}.json``)."""

    def __init__(
        self,
        run_dir: str | Path,
        *,
        attempts: int = 3,
        concurrency: int = 4,
        setup_timeout_sec: float = 600.0,
        teardown_timeout_sec: float = 60.0,
        retry_backoff_sec: float = 1.0,
        manager: PluginManager | None = None,
        progress: bool = True,
        console: Console | None = None,
        executor: str | Executor = "asyncio",
        executor_options: Any = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.attempts = attempts
        self.concurrency = concurrency
        self.setup_timeout_sec = setup_timeout_sec
        self.teardown_timeout_sec = teardown_timeout_sec
        self.retry_backoff_sec = retry_backoff_sec
        self.manager = manager or get_plugin_manager()
        self.progress = progress
        self.console = console or Console(stderr=True)
        self.executor = make_executor(executor, executor_options)
        """Where attempts run: a registered executor (``asyncio``, in-process; ``ray`` from tackroom-ray); see
        tackroom.executors."""

    # -- one attempt ----------------------------------------------------------------
    async def run_attempt(self, trial: Trial, task: Task, plugins: TrialPlugins, attempt: int,
                          policy: Policy | None = None) -> tuple[TrialResult, Trajectory]:
        """Run one attempt end to end; never raises (except on cancellation)."""
        result = TrialResult(
            trial_id=trial.id, task=task.id, harness=trial.harness, sandbox=trial.sandbox, verifier=trial.verifier,
            model=trial.model, pass_index=trial.pass_index, attempt=attempt,
            domain=task.domain, category=task.category,
        )
        trajectory = Trajectory(stop_reason="not_started")
        harness = plugins.harness_cls(plugins.harness_options)
        verifier = plugins.verifier_cls(plugins.verifier_options)
        policy = policy or plugins.policy
        spec = sandbox_spec(task, f"{trial.id}-a{attempt}")
        sandbox = plugins.sandbox.create(spec)
        started = time.monotonic()
        self._notify("tackroom_trial_started", trial=trial)
        phase = "sandbox_start"
        model_error: TrialErrorInfo | None = None

        async def timed(name: str, coro: Any, timeout: float) -> Any:
            t0 = time.monotonic()
            try:
                return await asyncio.wait_for(coro, timeout)
            except TimeoutError as exc:
                if name == "harness_run":
                    raise AgentTimeoutError(f"agent ran past the task's agent timeout ({timeout}s)") from exc
                raise PhaseTimeoutError(f"{name} ran past its {timeout}s limit") from exc
            finally:
                result.timings[name] = round(time.monotonic() - t0, 4)

        try:
            await timed("sandbox_start", sandbox.start(), spec.build_timeout_sec + spec.start_timeout_sec)
            phase = "verifier_prepare"
            await timed("verifier_prepare", verifier.prepare(task, sandbox), self.setup_timeout_sec)
            phase = "harness_setup"
            await timed("harness_setup", harness.setup(sandbox, task), self.setup_timeout_sec)
            phase = "harness_run"
            try:
                trajectory = await timed("harness_run", harness.run(task, sandbox, policy),
                                         task.config.agent.timeout_sec)
            except Exception as exc:
                if classify(exc, phase, self.manager) != "model":
                    raise
                model_error = self._error_info(exc, phase, "model")
                trajectory = Trajectory(stop_reason="agent_timeout" if isinstance(exc, TimeoutError) else "model_error")
                if isinstance(exc, TackroomError) and getattr(exc, "trajectory", None) is not None:
                    trajectory = exc.trajectory  # harnesses may attach what they had
            # The agent's turn is over (normally, by timeout or by its own error): nothing it started may
            # go on changing the sandbox while it is graded, so every process in it is killed and confirmed
            # gone first. A sandbox that cannot confirm it is an infra failure: the trial is not graded.
            phase = "kill_agent"
            await timed("kill_agent", sandbox.kill_processes(timeout=KILL_TIMEOUT_SEC), KILL_TIMEOUT_SEC + 5)
            phase = "verify"
            reward = await timed("verify", verifier.verify(task, sandbox, trajectory),
                                 task.config.verifier.timeout_sec + VERIFY_GRACE_SEC)
            reward.check_range(*task.config.verifier.reward_range, where=f"verifier {verifier.name!r}")
            result.reward = reward.score
            result.components = reward.components
            result.reward_details = reward.details
            result.error = model_error
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = self._error_info(exc, phase, classify(exc, phase, self.manager))
            if model_error is not None and error.error_class == "model":
                error = model_error  # the agent's own failure came first; what followed is its consequence
            elif model_error is not None:
                result.other_errors.append(model_error)  # kept beside the deciding task/infra error
            result.error = error
            if error.error_class == "model":
                result.reward = 0.0
        finally:
            t0 = time.monotonic()
            try:
                await asyncio.shield(asyncio.wait_for(sandbox.stop(), self.teardown_timeout_sec))
            except (Exception, asyncio.CancelledError) as exc:
                result.notes.append(f"teardown failed: {type(exc).__name__}: {exc}")
            result.timings["teardown"] = round(time.monotonic() - t0, 4)
            result.timings["total"] = round(time.monotonic() - started, 4)
            result.notes.extend(sandbox.notes)
        result.stop_reason = trajectory.stop_reason
        result.metrics = dict(trajectory.metrics)
        result.notes.extend(trajectory.notes)
        result.finished_at = datetime.now(UTC).isoformat()
        self._notify("tackroom_trial_finished", trial=trial, result=result)
        return result, trajectory

    @staticmethod
    def _error_info(exc: BaseException, phase: str, error_class: ErrorClass) -> TrialErrorInfo:
        message = str(exc) or repr(exc)
        return TrialErrorInfo(error_class=error_class, type=type(exc).__name__, message=message[:4000], phase=phase)

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
        attempt_no = 0
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential(multiplier=self.retry_backoff_sec, max=60),
            retry=retry_if_result(lambda r: r[0].error is not None and r[0].error.error_class == "infra"),
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
        ):
            with attempt:
                attempt_no += 1
                if final is not None:
                    history.append(AttemptRecord(attempt=final[0].attempt, error=final[0].error, timings=final[0].timings))
                final = await self._attempt_with_policy(trial, task, plugins, attempt_no)
            if not attempt.retry_state.outcome.failed:
                attempt.retry_state.set_result(final)
        assert final is not None
        result, trajectory = final
        result.previous_attempts = history
        out = self.run_dir / trial.id
        # A key an endpoint echoed back (say in a 400's message) must not reach disk either.
        written = redact(trajectory.model_dump(mode="json"))
        _atomic_write(out / "trajectory.json", written)
        _atomic_write(out / "result.json", result.dump())
        return TrialOutcome(result, Trajectory.model_validate(written))

    async def _attempt_with_policy(self, trial: Trial, task: Task, plugins: TrialPlugins,
                                   attempt: int) -> tuple[TrialResult, Trajectory]:
        if plugins.policy_for is None:
            return await self.executor.run_attempt(self, trial, task, plugins, attempt)
        async with plugins.policy_for(trial) as session:
            result, trajectory = await self.executor.run_attempt(self, trial, task, plugins, attempt,
                                                                 policy=session.policy)
            engine_error = session.error()
            if engine_error is not None and result.error is not None and result.error.phase == "harness_run":
                # The engine's own classification (down → infra, context exceeded → model) decides.
                result.error = self._error_info(engine_error, "harness_run", engine_error.error_class or "infra")
                if result.error.error_class != "model":
                    result.reward = None
            elif result.error is None and getattr(session, "unrecovered_error", None) is not None:
                # A harness that swallowed the engine's failure and returned normally: the episode was cut
                # short by the machinery, so its reward says nothing about the policy.
                cut = session.unrecovered_error()
                if cut is not None and cut.error_class == "infra":
                    result.error = self._error_info(cut, "harness_run", "infra")
                    result.reward = None
            return result, await session.complete(trajectory)

    def attempt_time_limit(self, task: Task) -> float:
        """The longest one attempt can legitimately take: the sum of its phase limits in :meth:`run_attempt`."""
        spec = sandbox_spec(task, "limit")
        return (spec.build_timeout_sec + spec.start_timeout_sec + 2 * self.setup_timeout_sec
                + task.config.agent.timeout_sec + KILL_TIMEOUT_SEC + 5
                + task.config.verifier.timeout_sec + VERIFY_GRACE_SEC + self.teardown_timeout_sec)

    # -- many trials ------------------------------------------------------------------
    def finished(self, trial: Trial) -> TrialResult | None:
        """A finished result of an earlier run of this trial (``infra`` failures are re-run)."""
        path = self.run_dir / trial.id / "result.json"
        if not path.is_file():
            return None
        try:
            result = TrialResult.model_validate_json(path.read_text())
        except ValueError:
            return None
        if result.error is not None and result.error.error_class == "infra":
            return None
        return result

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
            await self.executor.start(todo)
        semaphore = asyncio.Semaphore(self.executor.max_in_flight(self.concurrency))

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
