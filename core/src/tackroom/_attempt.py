"""One trial attempt as data, and its phases.

The runtime builds an :class:`AttemptPlan` per attempt (the trial, its task, each plugin as a :class:`PluginRef`,
the policy, the :class:`AttemptDeadlines`, the run's network default); an executor hands it to :func:`run_attempt`,
here or in another process (a plan pickles by reference), and never sees the runtime.

An attempt is five phases, each a method of :class:`Attempt` with its own limit, error class and notes: start,
setup (verifier prepare, harness setup), agent (its own failure is the model's; grading still runs), stop (the
agent's processes; listening ones kept frozen where the task wants them) and grade (the grading network, the
image's tools, the verifier, a regrade). Where the runtime prepares trials ahead (``prepare_ahead``), the attempt
waits between setup and agent, started and set up, for one of ``concurrency`` turns, off its clock. Failures are classified by the ``tackroom_classify_error`` hook (then
built-in rules), and :meth:`Attempt.decide` is the one place that picks the trial's error.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, PrivateAttr

from tackroom._config import NetworkDefaults
from tackroom._errors import ErrorClass, ModelError, PluginNotFoundError, TackroomError, TaskError
from tackroom._grading import copy_paths, stop_quietly, workdir_of
from tackroom._plugin import PluginKind, check_plugin_class
from tackroom._policy import Policy
from tackroom._reward import Reward
from tackroom._sandbox import (
    GraderBrokenError,
    GradingSabotagedError,
    NetworkPolicy,
    NetworkSwitch,
    ReadOnlyMounts,
    Sandbox,
    SandboxExhaustedError,
    SandboxProvider,
    SandboxSpec,
    ServiceKeeper,
    ToolRestorer,
)
from tackroom._task import Task, phase_networks, sandbox_refusal
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
    """A plugin class by name and ``module:qualname``, plus the options to build it with (as data). Made here
    (:meth:`of`), it also carries the live objects, which :meth:`resolve` returns as they are; pickled, only the
    data travels and the other side resolves the class through its plugin manager (or by import)."""

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
    """The runtime's phase limits; the task holds the rest (build, agent, verifier timeouts). An attempt also has
    one deadline, :meth:`time_limit` after it starts, and every phase's limit is cut to what is left of it."""

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
    network: NetworkDefaults = NetworkDefaults()
    """The network of each phase for a task that declares none (``[runtime] network``, ``--allow-internet``)."""
    force_build: bool = False

    @property
    def time_limit(self) -> float:
        return self.deadlines.time_limit(self.task)

    def blank_result(self, **fields: Any) -> TrialResult:
        """This attempt's result with nothing measured yet."""
        t, task = self.trial, self.task
        return TrialResult(trial_id=t.id, task=task.id, harness=t.harness, sandbox=t.sandbox, verifier=t.verifier,
                           model=t.model, pass_index=t.pass_index, attempt=self.attempt, domain=task.domain,
                           category=task.category, **fields)


def sandbox_spec(task: Task, name: str, deadlines: AttemptDeadlines | None = None, *,
                 network: NetworkPolicy | None = None, force_build: bool = False) -> SandboxSpec:
    """The sandbox a trial of ``task`` gets (an ``agent_in_sandbox`` harness's too); ``network`` is the agent
    phase's (default: the task's declaration, else none)."""
    env = task.config.environment
    return SandboxSpec(
        name=name,
        environment_dir=task.environment_dir if task.environment_dir.is_dir() else None,
        image=env.docker_image,
        force_build=force_build,
        cpus=env.cpus,
        memory_mb=env.memory_mb,
        network=network or phase_networks(task.config).agent,
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


RANK: dict[ErrorClass, int] = {"task": 0, "infra": 1, "model": 2}
"""Which error a trial reports when several happened (lowest first)."""


class Attempt:
    """One attempt's shared state and its phases (:meth:`start`, :meth:`setup`, :meth:`agent`, :meth:`stop`,
    :meth:`grade`), each run under its own limit, cut to what is left of the attempt's one deadline."""

    def __init__(self, plan: AttemptPlan, manager: PluginManager, turn: asyncio.Semaphore | None = None) -> None:
        self.plan, self.task, self.manager, self.deadlines = plan, plan.task, manager, plan.deadlines
        self.turn, self.has_turn = turn, False
        self.result = plan.blank_result()
        self.trajectory = Trajectory(stop_reason="not_started")
        harness_cls, harness_options = plan.harness.resolve(manager)
        self.verifier_cls, self.verifier_options = plan.verifier.resolve(manager)
        self.harness, self.verifier = harness_cls(harness_options), self.verifier_cls(self.verifier_options)
        self.networks = phase_networks(self.task.config, plan.network)
        self.spec = sandbox_spec(self.task, f"{plan.trial.id}-a{plan.attempt}", self.deadlines,
                                 network=self.networks.agent, force_build=plan.force_build)
        self.provider = plan.sandbox.provider(manager)
        self.sandbox = self.provider.create(self.spec)
        self.errors: list[TrialErrorInfo] = []
        self.step = "sandbox_start"
        """The step running now: the ``phase`` a failure is reported under."""
        self.started = time.monotonic()
        self.deadline = self.started + self.deadlines.time_limit(self.task)

    def note(self, text: str) -> None:
        self.result.notes.append(text)

    async def timed(self, step: str, coro: Awaitable[Any], limit: float) -> Any:
        """Run one step of a phase under ``limit`` (cut to the attempt's deadline), timed as ``step``. Only this limit
        running out is reported as one: a TimeoutError from inside (a sandbox command's own) is raised as it is."""
        self.step = step
        t0 = time.monotonic()
        cut = self.deadline - t0 < limit  # the attempt's deadline comes first
        limit = max(min(limit, self.deadline - t0), 0.001)
        try:
            async with asyncio.timeout(limit) as clock:
                return await coro
        except TimeoutError as exc:
            ran = f"{limit:g}s{' (all that was left of the attempt)' if cut else ''}, after {time.monotonic() - t0:.1f}s"
            if step == "harness_run":  # the harness's own TimeoutError stays the model's, as before, but says so
                raise AgentTimeoutError(f"agent ran past the task's agent timeout ({ran})" if clock.expired() else
                                        f"the harness raised {type(exc).__name__} within its {ran}: {exc}") from exc
            if not clock.expired():
                raise
            raise PhaseTimeoutError(f"{step} ran past its limit of {ran}") from exc
        finally:
            self.result.timings[step] = round(time.monotonic() - t0, 4)

    # -- the phases ------------------------------------------------------------------------------
    async def start(self) -> None:
        refused = sandbox_refusal(self.provider, self.task, self.plan.network)
        if refused:  # drivers refuse it before the run; a driver that did not reaches here
            raise TaskError(refused)
        if isinstance(self.sandbox, ReadOnlyMounts):  # what the harness prepared once is bound, not uploaded
            mounts = await self.timed("harness_mounts", self.harness.mounts(self.task), self.deadlines.setup_timeout_sec)
            if mounts:
                self.spec = self.spec.model_copy(update={"mounts": mounts})
                self.sandbox = self.provider.create(self.spec)
        await self.timed("sandbox_start", self.sandbox.start(), self.spec.build_timeout_sec + self.spec.start_timeout_sec)

    async def setup(self) -> None:
        await self.timed("verifier_prepare", self.verifier.prepare(self.task, self.sandbox), self.deadlines.setup_timeout_sec)
        await self.timed("harness_setup", self.harness.setup(self.sandbox, self.task), self.deadlines.setup_timeout_sec)

    async def take_turn(self) -> None:
        """Prepared (sandbox started, harness set up), wait for one of the runtime's turns; the wait is the
        ``prepared_wait`` timing and moves the attempt's deadline (it is no phase's time)."""
        if self.turn is None:
            return
        t0 = time.monotonic()
        await self.turn.acquire()
        self.has_turn = True
        waited = time.monotonic() - t0
        self.deadline += waited
        self.result.timings["prepared_wait"] = round(waited, 4)

    async def agent(self) -> None:
        """The harness's run. Its own failure (a timeout, a model error) is recorded and grading still runs on
        what the agent left, as Harbor does; any other failure ends the attempt."""
        limit = min(self.task.config.agent.timeout_sec, max(self.deadline - time.monotonic(), 0.001))
        agent_task = self.task.model_copy(update={"deadline": time.time() + limit})
        try:
            self.trajectory = await self.timed("harness_run", self.harness.run(agent_task, self.sandbox, self.plan.policy),
                                               limit)
        except Exception as exc:
            if classify(exc, "harness_run", self.manager) != "model":
                raise
            self.errors.append(error_info(exc, "harness_run", "model"))
            self.trajectory = Trajectory(stop_reason="agent_timeout" if isinstance(exc, TimeoutError) else "model_error")
            if isinstance(exc, TackroomError) and getattr(exc, "trajectory", None) is not None:
                self.trajectory = exc.trajectory  # harnesses may attach what they had

    async def stop(self) -> None:
        """The agent's turn is over: every process is killed and confirmed gone, but listening ones when the task
        keeps its services (``[verifier] keep_services``): frozen, they run only inside the grader's command. A
        sandbox that cannot confirm it is ``infra``; one the agent made unable to (every pid taken) is the model's 0."""
        try:
            await self.timed("kill_agent", self._kill(), KILL_TIMEOUT_SEC + KILL_GRACE_SEC)
        except SandboxExhaustedError as exc:
            self.note(f"the agent exhausted the sandbox, so its turn could not be ended cleanly ({exc}); graded 0")
            raise

    async def _kill(self) -> None:
        verifier = self.task.config.verifier
        if not (verifier.keep_services and verifier.grading == "shared"):
            await self.sandbox.kill_processes(timeout=KILL_TIMEOUT_SEC)
            return
        try:
            if not isinstance(self.sandbox, ServiceKeeper):
                raise NotImplementedError("not a ServiceKeeper")
            kept = await self.sandbox.kill_processes(timeout=KILL_TIMEOUT_SEC, keep_listening=True)
        except NotImplementedError:  # cannot here and now (local, unprivileged)
            self.note(f"{self.plan.trial.sandbox}: cannot keep the agent's services into grading, so every process "
                      "it started was killed (tests that talk to a server it started fail here, not under Harbor)")
            await self.sandbox.kill_processes(timeout=KILL_TIMEOUT_SEC)
            return
        if kept:
            shown = "; ".join(kept[:5]) + (f" and {len(kept) - 5} more" if len(kept) > 5 else "")
            self.note(f"kept {len(kept)} listening process(es) into grading, frozen except while test.sh runs: {shown}")

    async def grade(self) -> None:
        """The verifier's reward, on the grading phase's network; a ``task`` failure is regraded on an untouched
        environment to learn whose fault it is (:meth:`regrade_untouched`)."""
        second = self.deadlines.second_sandbox_limit(self.task)
        try:
            reward = await self.timed("verify", self._grade(), self.deadlines.grading_limit(self.task) - second)
        except Exception as exc:
            if classify(exc, "verify", self.manager) != "task" or isinstance(exc, GraderBrokenError):
                raise
            raise await self.timed("regrade", self.regrade_untouched(exc), second) from exc
        reward.check_range(*self.task.config.verifier.reward_range, where=f"verifier {self.verifier.name!r}")
        self.result.reward, self.result.components, self.result.reward_details = reward.score, reward.components, reward.details

    async def _grade(self) -> Reward:
        config = self.task.config.verifier
        if config.grading == "separate":
            grader = await self.fresh_sandbox("grade")
            try:
                copied = await copy_paths(self.sandbox, grader, [workdir_of(self.sandbox), *config.grading_paths],
                                          budget_mb=self.spec.storage_mb)
                self.note(f"graded in a fresh sandbox (grading = \"separate\"); copied {', '.join(copied) or 'nothing'}")
                return await self.verifier.verify(self.task, grader, self.trajectory)
            finally:
                await self.stop_other(grader)
        if self.networks.grading != self.networks.agent:
            try:
                if not isinstance(self.sandbox, NetworkSwitch):
                    raise NotImplementedError("not a NetworkSwitch")
                await self.sandbox.set_network(self.networks.grading, timeout=60.0)
            except NotImplementedError:
                self.note(f"{self.plan.trial.sandbox}: cannot change its network once started, so grading ran with "
                          f"the agent phase's ({self.networks.agent.describe()}), not {self.networks.grading.describe()}")
        keep = [workdir_of(self.sandbox), *config.grading_paths]
        restored = await self.sandbox.restore_image_tools(keep=keep) if isinstance(self.sandbox, ToolRestorer) else None
        if restored is None:
            self.note(f"{self.plan.trial.sandbox}: grading ran with the sandbox's executables as the agent left "
                      "them (this sandbox cannot restore the image's); grading = \"separate\" avoids that")
        elif restored:
            shown = ", ".join(restored[:10]) + (f" and {len(restored) - 10} more" if len(restored) > 10 else "")
            self.note(f"restored the image's tools before grading: {shown}")
        return await self.verifier.verify(self.task, self.sandbox, self.trajectory)

    async def regrade_untouched(self, error: BaseException) -> BaseException:
        """Grading failed as a ``task`` error after the agent ran: grade an untouched sandbox to learn whose fault it is."""
        clean = await self.fresh_sandbox("untouched")
        try:
            clean_verifier = self.verifier_cls(self.verifier_options)
            await clean_verifier.prepare(self.task, clean)
            await clean_verifier.verify(self.task, clean, Trajectory(stop_reason="untouched"))
        except Exception as again:
            if classify(again, "verify", self.manager) == "infra":
                return again
            return GraderBrokenError(f"grading failed ({type(error).__name__}: {error}), and on an environment no agent "
                                     f"touched too ({type(again).__name__}: {again}): the task's grader is broken")
        finally:
            await self.stop_other(clean)
        self.note(f"grading failed only on what the agent left ({type(error).__name__}); an untouched "
                  "environment of the task grades cleanly, so the failure counts as the model's: reward 0")
        return GradingSabotagedError(f"grading failed on what the agent left ({type(error).__name__}: {error}) but works "
                                     "on an untouched environment: sabotaged grading, reward 0")

    async def fresh_sandbox(self, suffix: str) -> Sandbox:
        """A second sandbox of this task, started on the grading network, that no agent touched (see _grading)."""
        other = self.provider.create(self.spec.model_copy(update={"name": f"{self.spec.name}-{suffix}",
                                                                  "network": self.networks.grading}))
        try:
            await other.start()
        except BaseException:
            await self.stop_other(other)
            raise
        return other

    async def stop_other(self, sandbox: Sandbox) -> None:
        note = await stop_quietly(sandbox, self.deadlines.teardown_timeout_sec)
        if note:
            self.note(note)

    async def teardown(self) -> None:
        t0 = time.monotonic()
        try:
            await asyncio.shield(asyncio.wait_for(self.sandbox.stop(), self.deadlines.teardown_timeout_sec))
        except (Exception, asyncio.CancelledError) as exc:
            self.note(f"teardown failed: {type(exc).__name__}: {exc}")
        self.result.timings["teardown"] = round(time.monotonic() - t0, 4)
        self.result.timings["total"] = round(time.monotonic() - self.started, 4)
        self.result.notes.extend(self.sandbox.notes)

    # -- the outcome -----------------------------------------------------------------------------
    async def run(self, on_started: Callable[[], None] | None = None) -> tuple[TrialResult, Trajectory]:
        if on_started is not None:
            on_started()
        try:
            for phase in (self.start, self.setup, self.take_turn, self.agent, self.stop, self.grade):
                try:
                    await phase()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self.errors.append(error_info(exc, self.step, classify(exc, self.step, self.manager)))
                    break
        finally:
            if self.has_turn:  # the next prepared attempt goes on while this one tears down
                self.turn.release()
            await self.teardown()
        self.decide()
        self.network_notes()
        result = self.result
        result.stop_reason = self.trajectory.stop_reason
        result.metrics = dict(self.trajectory.metrics)
        result.notes.extend(self.trajectory.notes)
        result.finished_at = datetime.now(UTC).isoformat()
        return result, self.trajectory

    def decide(self) -> None:
        """The one place that picks the trial's error: ``task`` > ``infra`` > ``model``, the first of a class (the
        agent's own failure comes first; a model failure after it is its consequence). A ``task`` or ``infra``
        error leaves no reward (it cannot be trusted) and keeps the agent's beside it in ``other_errors``; a
        ``model`` error leaves the graded reward where grading finished, else 0."""
        if not self.errors:
            return
        winner = min(self.errors, key=lambda e: RANK[e.error_class])
        self.result.error = winner
        if winner.error_class == "model":
            self.result.reward = 0.0 if self.result.reward is None else self.result.reward
        else:
            self.result.other_errors = [e for e in self.errors if e is not winner]

    def network_notes(self) -> None:
        """A phase that ran offline because the task declares no network says so; a failed grading then says the
        network may be what it missed (Harbor's default for such a task is the internet)."""
        how = "`--allow-internet` or `[runtime] network = \"public\"` gives it the internet (Harbor's default)"
        if not self.networks.agent_declared and not self.networks.agent.online:
            self.note(f"the agent ran offline: the task declares no network for its turn and the run gives none; {how}")
        if self.networks.grading_declared or self.networks.grading.online or self.result.timings.get("verify") is None:
            return
        error, said = self.result.error, " ".join(str(v) for v in self.result.reward_details.values()).lower()
        # A low reward is a grade; only a grader that failed, or whose output shows a lookup or connection failing, is
        # one that may have missed the network.
        failed = (error is not None and error.phase in ("verify", "regrade")) or any(sign in said for sign in OFFLINE)
        self.note(f"grading ran offline: the task declares no network for grading and the run gives none; {how}"
                  + ("; grading failed, and a test.sh that installs its tools (apt, pip, uv) fails without the network"
                     if failed else ""))


OFFLINE = ("name resolution", "could not resolve", "network is unreachable", "failed to fetch", "connection refused",
           "failed to establish a new connection", "no matching distribution", "failed to download")


async def run_attempt(plan: AttemptPlan, *, manager: PluginManager | None = None,
                      on_started: Callable[[], None] | None = None,
                      turn: asyncio.Semaphore | None = None) -> tuple[TrialResult, Trajectory]:
    """Run one attempt end to end in this process; never raises (but on cancellation).

    ``on_started`` is called once the sandbox object exists, before anything runs in it. With ``turn``, the
    attempt holds one of its places from the agent's run to grading's end (:meth:`Attempt.take_turn`).
    Lifecycle hooks are the caller's (the runtime fires them around the executor).
    """
    if manager is None:
        from tackroom._manager import get_plugin_manager

        manager = get_plugin_manager()
    return await Attempt(plan, manager, turn).run(on_started)
