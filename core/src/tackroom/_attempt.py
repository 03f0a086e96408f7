"""One trial attempt as data, and the free function that runs it.

The runtime builds an :class:`AttemptPlan` once per attempt: the trial, its task,
each plugin as a :class:`PluginRef` (``module:qualname`` plus options as data), the
policy and the :class:`AttemptDeadlines`. An executor hands the plan to
:func:`run_attempt`, here or in another process (a plan pickles by reference: the
live objects a reference may carry in this process stay behind), and never sees the
runtime. The runtime keeps what is per run: retries, policy sessions, hooks, files.

:func:`run_attempt` is sandbox start → verifier prepare → harness setup → harness run
→ kill the agent's processes → verify → teardown. Every phase has a limit; the sum of
those limits, :meth:`AttemptDeadlines.time_limit`, is computed here and nowhere else.
Failures are classified by the ``tackroom_classify_error`` hook (then by built-in rules)
into ``infra``, ``model`` and ``task``; see ``_runtime`` for what each one means.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, PrivateAttr

from tackroom._errors import ErrorClass, ModelError, PluginNotFoundError, TackroomError
from tackroom._grading import copy_paths, stop_quietly, workdir_of
from tackroom._plugin import PluginKind, check_plugin_class
from tackroom._policy import Policy
from tackroom._reward import Reward
from tackroom._sandbox import GraderBrokenError, GradingSabotagedError, SandboxProvider, SandboxSpec
from tackroom._task import Task
from tackroom._trajectory import Trajectory
from tackroom._trial import Trial, TrialErrorInfo, TrialResult, slug

if TYPE_CHECKING:  # the plugin manager's registrar imports the executors, which import this module
    from tackroom._manager import PluginManager

log = logging.getLogger(__name__)

ERROR_CLASSES: tuple[ErrorClass, ...] = ("infra", "model", "task")
KILL_TIMEOUT_SEC = 30.0
"""How long a sandbox gets to kill and confirm gone every process the agent started."""
KILL_GRACE_SEC = 5.0
"""Beyond ``KILL_TIMEOUT_SEC``: the sandbox's own answer that the kill is done."""
VERIFY_GRACE_SEC = 120.0
"""Beyond the task's verifier timeout: uploading the tests and reading the reward around ``test.sh``."""


class AgentTimeoutError(ModelError, TimeoutError):
    """The harness ran past the task's agent timeout."""


class PhaseTimeoutError(TackroomError, TimeoutError):
    """A runtime phase other than the agent run ran past its limit."""

    error_class = "infra"


class PluginRef(BaseModel):
    """A plugin class by name and ``module:qualname``, plus the options to build it with (as data).

    Built in this process (:meth:`of`), a reference also carries the live class, options and (for a
    sandbox provider) instance, and :meth:`resolve` returns them as they are: an attempt run here
    uses exactly the objects the caller passed. Pickled, only the data travels, and the other side
    resolves the class through its own plugin manager (or by import) and builds fresh instances.
    """

    model_config = ConfigDict(frozen=True)

    kind: PluginKind
    name: str
    reference: str
    options: dict[str, Any]
    _live: tuple[type, Any, Any] | None = PrivateAttr(default=None)
    """(class, options model, instance or None), in the process that made the reference only."""

    @classmethod
    def of(cls, plugin_cls: type, options: Any, instance: Any = None) -> PluginRef:
        """Describe ``plugin_cls`` built with ``options`` (its ``Options`` model or a dict); ``instance``
        is the object itself where one exists (a sandbox provider, which may hold clients)."""
        data = options.model_dump(by_alias=True, round_trip=True) if isinstance(options, BaseModel) else dict(options or {})
        ref = cls(kind=plugin_cls.kind, name=plugin_cls.name,
                  reference=f"{plugin_cls.__module__}:{plugin_cls.__qualname__}", options=data)
        ref._live = (plugin_cls, options, instance)
        return ref

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        return {**state, "__pydantic_private__": {"_live": None}}

    def load(self, manager: PluginManager) -> type:
        """The class: the live one, else through the plugin manager when it knows this name at this
        reference (the installed entry points), else by import."""
        if self._live is not None:
            return self._live[0]
        try:
            entry = manager.entry(self.kind, self.name)
        except PluginNotFoundError:
            entry = None
        if entry is not None and entry.reference == self.reference:
            return entry.load()
        from tackroom._import_ref import import_ref

        return check_plugin_class(import_ref(self.reference), self.kind)

    def resolve(self, manager: PluginManager) -> tuple[type, Any]:
        """``(class, options model)``, ready to build a harness or verifier."""
        if self._live is not None and self._live[1] is not None:
            return self._live[0], self._live[1]
        plugin_cls = self.load(manager)
        return plugin_cls, plugin_cls.Options.model_validate(self.options)

    def provider(self, manager: PluginManager) -> SandboxProvider:
        """The sandbox provider: the live instance, else one built in this process and kept for later
        attempts (providers may hold clients)."""
        if self._live is not None and self._live[2] is not None:
            return self._live[2]
        provider = _providers.get(self.key)
        if provider is None:
            provider_cls, options = self.resolve(manager)
            provider = _providers[self.key] = provider_cls(options)
        return provider

    @property
    def key(self) -> str:
        """Identity of (class, options)."""
        return f"{self.reference}|{json.dumps(self.options, sort_keys=True, default=repr)}"


_providers: dict[str, SandboxProvider] = {}
"""Sandbox providers this process built from references (a worker's), reused by later attempts."""


class AttemptDeadlines(BaseModel):
    """The runtime's phase limits; the task holds the rest (build, agent, verifier timeouts).

    One attempt also has one deadline, :meth:`time_limit` after it starts: every phase's limit is cut to
    what is left of it, so no phase can outlast the trial (a sandbox hanging at start or setup is an
    ``infra`` error within its own phase limit).
    """

    model_config = ConfigDict(frozen=True)

    setup_timeout_sec: float = 600.0
    """Each of verifier prepare and harness setup."""
    start_timeout_sec: float = 120.0
    """Starting the sandbox once its image exists (the build has the task's ``build_timeout_sec``)."""
    teardown_timeout_sec: float = 60.0

    def second_sandbox_limit(self, task: Task) -> float:
        """Starting, grading and stopping one more sandbox of ``task`` (separate grading, or the regrade of an
        untouched environment; see :mod:`tackroom._grading`)."""
        env = task.config.environment
        return (env.build_timeout_sec + self.start_timeout_sec + self.setup_timeout_sec
                + task.config.verifier.timeout_sec + VERIFY_GRACE_SEC + self.teardown_timeout_sec)

    def grading_limit(self, task: Task) -> float:
        """The longest grading may take: the verifier (in a second sandbox with ``grading = "separate"``), plus
        a regrade of an untouched environment when it fails as a ``task`` error."""
        verify = task.config.verifier.timeout_sec + VERIFY_GRACE_SEC
        if task.config.verifier.grading == "separate":
            verify += self.second_sandbox_limit(task)
        return verify + self.second_sandbox_limit(task)

    def time_limit(self, task: Task) -> float:
        """The longest one attempt of ``task`` can legitimately take: the sum of :func:`run_attempt`'s phase limits."""
        spec = sandbox_spec(task, "limit", self)
        return (spec.build_timeout_sec + spec.start_timeout_sec + 2 * self.setup_timeout_sec
                + task.config.agent.timeout_sec + KILL_TIMEOUT_SEC + KILL_GRACE_SEC
                + self.grading_limit(task) + self.teardown_timeout_sec)


class AttemptPlan(BaseModel):
    """Everything one attempt needs, built once by the runtime; picklable (plugins travel by reference)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    trial: Trial
    task: Task
    harness: PluginRef
    sandbox: PluginRef
    verifier: PluginRef
    attempt: int
    deadlines: AttemptDeadlines = AttemptDeadlines()
    policy: Policy | None = None

    @property
    def time_limit(self) -> float:
        return self.deadlines.time_limit(self.task)

    def blank_result(self, **fields: Any) -> TrialResult:
        """This attempt's result with nothing measured yet."""
        t, task = self.trial, self.task
        return TrialResult(trial_id=t.id, task=task.id, harness=t.harness, sandbox=t.sandbox, verifier=t.verifier,
                           model=t.model, pass_index=t.pass_index, attempt=self.attempt, domain=task.domain,
                           category=task.category, **fields)


def sandbox_spec(task: Task, name: str, deadlines: AttemptDeadlines | None = None) -> SandboxSpec:
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
        start_timeout_sec=(deadlines or AttemptDeadlines()).start_timeout_sec,
        storage_mb=env.storage_mb,
        labels={"tackroom._task": slug(task.id)},
    )


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


def error_info(exc: BaseException, phase: str, error_class: ErrorClass) -> TrialErrorInfo:
    message = str(exc) or repr(exc)
    return TrialErrorInfo(error_class=error_class, type=type(exc).__name__, message=message[:4000], phase=phase)


async def run_attempt(plan: AttemptPlan, *, manager: PluginManager | None = None,
                      on_started: Callable[[], None] | None = None) -> tuple[TrialResult, Trajectory]:
    """Run one attempt end to end in this process; never raises (but on cancellation).

    ``on_started`` is called once the sandbox object exists, before anything runs in it.
    Lifecycle hooks are the caller's (the runtime fires them around the executor).
    """
    if manager is None:
        from tackroom._manager import get_plugin_manager

        manager = get_plugin_manager()
    result = plan.blank_result()
    trajectory = Trajectory(stop_reason="not_started")
    task, deadlines = plan.task, plan.deadlines
    harness_cls, harness_options = plan.harness.resolve(manager)
    verifier_cls, verifier_options = plan.verifier.resolve(manager)
    harness, verifier = harness_cls(harness_options), verifier_cls(verifier_options)
    spec = sandbox_spec(task, f"{plan.trial.id}-a{plan.attempt}", deadlines)
    provider = plan.sandbox.provider(manager)
    sandbox = provider.create(spec)
    started = time.monotonic()
    deadline = started + deadlines.time_limit(task)
    if on_started is not None:
        on_started()
    phase = "sandbox_start"
    model_error: TrialErrorInfo | None = None

    async def timed(name: str, coro: Any, timeout: float) -> Any:
        t0 = time.monotonic()
        limit = max(min(timeout, deadline - t0), 0.001)  # one deadline for the whole attempt
        try:
            return await asyncio.wait_for(coro, limit)
        except TimeoutError as exc:
            if name == "harness_run":
                raise AgentTimeoutError(f"agent ran past the task's agent timeout ({limit:g}s)") from exc
            raise PhaseTimeoutError(f"{name} ran past its {limit:g}s limit") from exc
        finally:
            result.timings[name] = round(time.monotonic() - t0, 4)

    async def fresh_sandbox(suffix: str) -> Any:
        """A second sandbox of this task, started, that no agent touched (for grading; see _grading)."""
        other = provider.create(spec.model_copy(update={"name": f"{spec.name}-{suffix}"}))
        try:
            await other.start()
        except BaseException:
            note = await stop_quietly(other, deadlines.teardown_timeout_sec)
            if note:
                result.notes.append(note)
            raise
        return other

    async def grade() -> Reward:
        if task.config.verifier.grading == "separate":
            grader = await fresh_sandbox("grade")
            try:
                copied = await copy_paths(sandbox, grader, [workdir_of(sandbox), *task.config.verifier.grading_paths])
                result.notes.append(f"graded in a fresh sandbox (grading = \"separate\"); copied {', '.join(copied) or 'nothing'}")
                return await verifier.verify(task, grader, trajectory)
            finally:
                note = await stop_quietly(grader, deadlines.teardown_timeout_sec)
                if note:
                    result.notes.append(note)
        restored = await sandbox.restore_image_tools(keep=[workdir_of(sandbox), *task.config.verifier.grading_paths])
        if restored is None:
            result.notes.append(f"{plan.trial.sandbox}: grading ran with the sandbox's executables as the agent left "
                                "them (this sandbox cannot restore the image's); grading = \"separate\" avoids that")
        elif restored:
            shown = ", ".join(restored[:10]) + (f" and {len(restored) - 10} more" if len(restored) > 10 else "")
            result.notes.append(f"restored the image's tools before grading: {shown}")
        return await verifier.verify(task, sandbox, trajectory)

    async def regrade_untouched(error: BaseException) -> BaseException:
        """Grading failed as a ``task`` error after the agent ran: grade an untouched sandbox to learn whose fault it is."""
        clean = await fresh_sandbox("untouched")
        try:
            clean_verifier = verifier_cls(verifier_options)
            await clean_verifier.prepare(task, clean)
            await clean_verifier.verify(task, clean, Trajectory(stop_reason="untouched"))
        except Exception as again:
            if classify(again, "verify", manager) == "infra":
                return again
            return GraderBrokenError(f"grading failed ({type(error).__name__}: {error}), and on an environment no agent "
                                     f"touched too ({type(again).__name__}: {again}): the task's grader is broken")
        finally:
            note = await stop_quietly(clean, deadlines.teardown_timeout_sec)
            if note:
                result.notes.append(note)
        result.notes.append(f"grading failed only on what the agent left ({type(error).__name__}); an untouched "
                            "environment of the task grades cleanly, so the failure counts as the model's: reward 0")
        return GradingSabotagedError(f"grading failed on what the agent left ({type(error).__name__}: {error}) but works "
                                     "on an untouched environment: sabotaged grading, reward 0")

    try:
        await timed("sandbox_start", sandbox.start(), spec.build_timeout_sec + spec.start_timeout_sec)
        phase = "verifier_prepare"
        await timed("verifier_prepare", verifier.prepare(task, sandbox), deadlines.setup_timeout_sec)
        phase = "harness_setup"
        await timed("harness_setup", harness.setup(sandbox, task), deadlines.setup_timeout_sec)
        phase = "harness_run"
        agent_timeout = min(task.config.agent.timeout_sec, max(deadline - time.monotonic(), 0.001))
        agent_task = task.model_copy(update={"deadline": time.time() + agent_timeout})
        try:
            trajectory = await timed("harness_run", harness.run(agent_task, sandbox, plan.policy), agent_timeout)
        except Exception as exc:
            if classify(exc, phase, manager) != "model":
                raise
            model_error = error_info(exc, phase, "model")
            trajectory = Trajectory(stop_reason="agent_timeout" if isinstance(exc, TimeoutError) else "model_error")
            if isinstance(exc, TackroomError) and getattr(exc, "trajectory", None) is not None:
                trajectory = exc.trajectory  # harnesses may attach what they had
        # The agent's turn is over (normally, by timeout or by its own error): nothing it started may
        # go on changing the sandbox while it is graded, so every process in it is killed and confirmed
        # gone first. A sandbox that cannot confirm it is an infra failure: the trial is not graded.
        phase = "kill_agent"
        await timed("kill_agent", sandbox.kill_processes(timeout=KILL_TIMEOUT_SEC), KILL_TIMEOUT_SEC + KILL_GRACE_SEC)
        phase = "verify"
        try:
            reward = await timed("verify", grade(), deadlines.grading_limit(task) - deadlines.second_sandbox_limit(task))
        except Exception as exc:
            if classify(exc, phase, manager) != "task" or isinstance(exc, GraderBrokenError):
                raise
            phase = "regrade"
            raise await timed("regrade", regrade_untouched(exc), deadlines.second_sandbox_limit(task)) from exc
        reward.check_range(*task.config.verifier.reward_range, where=f"verifier {verifier.name!r}")
        result.reward = reward.score
        result.components = reward.components
        result.reward_details = reward.details
        result.error = model_error
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        error = error_info(exc, phase, classify(exc, phase, manager))
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
            await asyncio.shield(asyncio.wait_for(sandbox.stop(), deadlines.teardown_timeout_sec))
        except (Exception, asyncio.CancelledError) as exc:
            result.notes.append(f"teardown failed: {type(exc).__name__}: {exc}")
        result.timings["teardown"] = round(time.monotonic() - t0, 4)
        result.timings["total"] = round(time.monotonic() - started, 4)
        result.notes.extend(sandbox.notes)
    result.stop_reason = trajectory.stop_reason
    result.metrics = dict(trajectory.metrics)
    result.notes.extend(trajectory.notes)
    result.finished_at = datetime.now(UTC).isoformat()
    return result, trajectory
