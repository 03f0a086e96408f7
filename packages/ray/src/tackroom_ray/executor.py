"""The ``ray`` executor: each trial attempt is one Ray task, in its own worker process.

Why: one Python process shared by hundreds of agent loops is one event loop,
one set of file descriptors and one garbage collector for all of them (the
Mercor/SkyRL guide saw constant MCP disconnects at 300–800 rollouts). Here
each attempt (sandbox start → harness → verify → teardown) runs in a Ray
worker process with a fractional CPU reservation, on any node of the cluster.

The driver keeps the rest: the attempts policy, resume, policy sessions (the
gateway) and the run directory, which only the driver writes, once per
trial. A task is a two-item streaming generator: first the worker's identity
(the attempt has started; its deadline starts now), then the outcome. Ray's
own task retries are off, so a dead worker surfaces as an ``infra`` error of
that attempt and the runtime's attempts policy decides, exactly as for any
other infra failure.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tackroom import Trajectory, TrialResult
from tackroom.executors import AttemptPlan, Executor, ExecutorUnavailableError, run_attempt
from tackroom_app import TrialErrorInfo
from tackroom_ray import RAY
from tackroom_ray.errors import AttemptDeadlineError, WorkerLostError
from tackroom_ray.options import RayOptions
from tackroom_ray.shipping import check_plans

if TYPE_CHECKING:
    from tackroom_app import PluginManager

log = logging.getLogger(__name__)

UV_RUN_FLAG = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"
FORWARDED_ENV = ("TACKROOM_LOAD_PLUGINS", "TACKROOM_BLOCK_PLUGINS")
HEARTBEAT_SEC = 0.2
FORCE_KILL_WAIT_SEC = 30.0
LOCAL_START_ATTEMPTS = 3


def import_ray() -> Any:
    """Import Ray, or say how to install it."""
    # Under `uv run`, Ray (2.45+) would otherwise re-create the project's virtualenv for
    # its workers from a zip of the working directory (tens of seconds per start, and a
    # second copy of every dependency). Locally started workers already use this
    # interpreter; a cluster brings its own environment. Set the variable to 1 to opt in.
    os.environ.setdefault(UV_RUN_FLAG, "0")
    try:
        import ray
    except ImportError as exc:
        raise ExecutorUnavailableError(
            "the ray executor needs Ray, which is not installed: pip install tackroom-ray (it depends on "
            "ray>=2.50), or use executor = \"asyncio\""
        ) from exc
    return ray


def _runtime_env(options: RayOptions) -> dict[str, Any] | None:
    env = dict(options.runtime_env or {})
    forwarded = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
    if forwarded:
        env["env_vars"] = {**forwarded, **dict(env.get("env_vars") or {})}  # type: ignore[arg-type]
    return env or None


def connect(options: RayOptions) -> Any:
    """Attach to a Ray cluster (``address``, ``RAY_ADDRESS``, a local ``ray start``) or start a local one.

    A process where Ray is already initialised (SkyRL's trainer, a notebook)
    is used as it is.
    """
    ray = import_ray()
    if ray.is_initialized():
        return ray
    common: dict[str, Any] = {"logging_level": logging.WARNING, "runtime_env": _runtime_env(options)}
    address = options.address or os.environ.get("RAY_ADDRESS")
    if address and address != "local":
        try:
            ray.init(address=address, **common)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise ExecutorUnavailableError(
                f"runtime.ray.address: could not attach to the Ray cluster at {address!r}: {exc}. Start it "
                "(`ray start --head`), fix the address, or leave address unset to start a local cluster"
            ) from exc
        return ray
    if address != "local":
        try:
            ray.init(address="auto", **common)
            log.info("attached to the running Ray cluster")
            return ray
        except ConnectionError:
            pass  # nothing running: start one
    num_cpus = options.local_num_cpus or os.cpu_count() or 1
    for attempt in range(1, LOCAL_START_ATTEMPTS + 1):
        try:
            ray.init(
                num_cpus=num_cpus,
                resources=dict(options.local_resources) or None,
                include_dashboard=False,
                object_store_memory=options.object_store_mb * 1024 * 1024,
                # Ray keeps one idle worker per CPU and kills the rest after a second; with
                # fractional CPUs per trial every batch would then pay for new processes.
                _system_config={"num_workers_soft_limit": max(num_cpus, math.ceil(num_cpus / options.num_cpus_per_trial))},
                **common,
            )
            break
        except Exception as exc:  # Ray raises a bare Exception when its raylet misses a fixed 30 s start window
            ray.shutdown()
            if attempt == LOCAL_START_ATTEMPTS:
                raise ExecutorUnavailableError(
                    f"could not start a local Ray cluster ({LOCAL_START_ATTEMPTS} tries): {exc}. On a loaded "
                    "machine, retry; or start one yourself with `ray start --head` and it will be attached to"
                ) from exc
            log.warning("starting a local Ray cluster failed (%s); trying again", exc)
    log.info("started a local Ray cluster: %s", ray.cluster_resources())
    return ray


def _run_with_heartbeat(plan: AttemptPlan) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        # Ray delivers a (soft) cancel as KeyboardInterrupt raised in this thread, which
        # only happens while Python code runs; an event loop asleep in epoll for minutes
        # would never see it. The beat keeps the loop waking, and asyncio.run then
        # cancels the attempt, so its teardown runs before the worker reports back. The
        # beat also reads Ray's cancellation flag, so a cancel whose interrupt went
        # astray still stops the attempt the same way.
        attempt = asyncio.current_task()
        assert attempt is not None
        context = _runtime_context()

        async def beat() -> None:
            while True:
                await asyncio.sleep(HEARTBEAT_SEC)
                if context is not None and context.is_canceled():
                    log.warning("tackroom: attempt %s cancelled by the driver (flag); tearing down", plan.trial.id)
                    attempt.cancel()
                    return

        heart = asyncio.create_task(beat())
        try:
            # lifecycle hooks are the driver's; error classification runs here, where the exception is
            result, trajectory = await run_attempt(plan)
            return {"result": result.dump(), "trajectory": trajectory.model_dump(mode="json")}
        finally:
            heart.cancel()

    # Ray's worker installs uvloop as the event loop policy; attempts run on the standard
    # loop instead, so subprocesses, timeouts and cancellation behave as under `asyncio`.
    installed = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())
    try:
        return asyncio.run(main())
    finally:
        asyncio.set_event_loop_policy(installed)


def _runtime_context() -> Any:
    """Ray's runtime context where this is a Ray worker (else None: a plain call, as in tests)."""
    try:
        import ray

        context = ray.get_runtime_context()
        context.is_canceled()
    except Exception:  # not a worker, or a Ray without the flag
        return None
    return context


def run_attempt_task(plan: AttemptPlan) -> Iterator[dict[str, Any]]:
    """The Ray task (a streaming generator): who runs the attempt, then its outcome."""
    import ray

    context = ray.get_runtime_context()
    yield {"pid": os.getpid(), "node_id": context.get_node_id()}
    yield _run_with_heartbeat(plan)


class RayExecutor(Executor, spec=RAY):
    """Each attempt as a Ray task in its own worker process, on a local or an existing Ray cluster."""

    options: RayOptions

    def __init__(self, options: RayOptions | None = None) -> None:
        super().__init__(options)
        self._ray: Any = None
        self._remote: Any = None

    # -- setup ------------------------------------------------------------------------
    def _connect(self) -> Any:
        if self._remote is None:
            ray = connect(self.options)
            # max_retries=0: a dead worker must reach the runtime's attempts policy, not be
            # silently re-run by Ray (that would run a trial more often than configured).
            self._remote = ray.remote(max_retries=0, retry_exceptions=False)(run_attempt_task)
            self._ray = ray
        return self._ray

    async def start(self, plans: list[AttemptPlan]) -> None:
        check_plans(plans)  # refuse classes a worker cannot import before anything runs
        self._check_feasible(self._connect())

    def _check_feasible(self, ray: Any) -> None:
        """Refuse placement no node can satisfy: such a task would wait in Ray's queue forever."""
        o = self.options
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        if o.node_id and not o.soft_affinity and o.node_id not in {n.get("NodeID") for n in nodes}:
            raise ExecutorUnavailableError(
                f"runtime.ray.node_id: no live node {o.node_id!r} in the cluster; live nodes: "
                f"{', '.join(n.get('NodeID', '?') for n in nodes)} (or set soft_affinity = true)")
        wanted = {"CPU": o.num_cpus_per_trial, **o.resources}
        if o.memory_mb_per_trial:
            wanted["memory"] = o.memory_mb_per_trial * 1024 * 1024
        if not any(all(n.get("Resources", {}).get(k, 0) >= v for k, v in wanted.items()) for n in nodes):
            have = sorted({k for n in nodes for k in n.get("Resources", {}) if not k.startswith("node:")})
            raise ExecutorUnavailableError(
                f"runtime.ray: no node of the cluster has {wanted} for a trial (resources there: {', '.join(have)}). "
                "Lower num_cpus_per_trial / memory_mb_per_trial, fix resources, or start nodes with "
                "`ray start --resources '{\"<name>\": <amount>}'`")

    def max_in_flight(self, concurrency: int) -> int:
        return self.options.max_concurrency or concurrency

    def _task_options(self) -> dict[str, Any]:
        o = self.options
        opts: dict[str, Any] = {"num_cpus": o.num_cpus_per_trial, "num_returns": "streaming", "name": "tackroom-trial"}
        if o.resources:
            opts["resources"] = dict(o.resources)
        if o.memory_mb_per_trial:
            opts["memory"] = o.memory_mb_per_trial * 1024 * 1024
        if o.node_id:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=o.node_id, soft=o.soft_affinity)
        return opts

    # -- one attempt ----------------------------------------------------------------------
    async def run(self, plan: AttemptPlan, *, manager: PluginManager,
                  on_started: Callable[[], None]) -> tuple[TrialResult, Trajectory]:
        ray = self._connect()
        submitted, started_at = time.monotonic(), datetime.now(UTC).isoformat()
        stream = self._remote.options(**self._task_options()).remote(plan)
        worker: dict[str, Any] = {}
        pending: asyncio.Future[Any] | None = None
        grace = plan.deadlines.teardown_timeout_sec + 10
        try:
            worker = await self._next(stream)
            on_started()
            limit = self.options.attempt_timeout_sec or plan.time_limit + self.options.deadline_grace_sec
            pending = asyncio.ensure_future(self._next(stream))
            done, _ = await asyncio.wait({pending}, timeout=limit)
            if not done:
                await self._stop(stream, pending, grace)
                why = ("attempt_timeout_sec" if self.options.attempt_timeout_sec
                       else "the sum of its phase timeouts plus deadline_grace_sec")
                raise AttemptDeadlineError(
                    f"the attempt ran past {limit:.0f}s ({why}); its Ray worker{_where(worker)} was cancelled. "
                    "A harness that blocks its event loop (synchronous I/O, a busy loop) escapes every phase timeout")
            outcome = pending.result()
            result = TrialResult.model_validate(outcome["result"])
            trajectory = Trajectory.model_validate(outcome["trajectory"])
        except asyncio.CancelledError:
            if pending is None:  # not started yet, or starting: a soft cancel stops it wherever it is
                self._ray.cancel(stream, force=False)
            else:
                await asyncio.shield(self._stop(stream, pending, grace))
            raise
        except (ray.exceptions.RayError, AttemptDeadlineError) as exc:
            result, trajectory = self._failed(plan, exc, worker, time.monotonic() - submitted)
            result.started_at = started_at
        return result, trajectory

    @staticmethod
    async def _next(stream: Any) -> Any:
        ref = await stream.__anext__()
        return await ref

    async def _stop(self, stream: Any, pending: asyncio.Future[Any], grace: float) -> None:
        """Cancel softly (the worker tears the sandbox down), then kill the worker if it does not stop."""
        self._ray.cancel(stream, force=False)
        done, _ = await asyncio.wait({pending}, timeout=grace)
        if not done:
            self._ray.cancel(stream, force=True)
            done, _ = await asyncio.wait({pending}, timeout=FORCE_KILL_WAIT_SEC)
        if not done:
            pending.cancel()
        elif not pending.cancelled():
            pending.exception()  # retrieved: the cancellation error is expected here

    def _failed(self, plan: AttemptPlan, exc: BaseException, worker: dict[str, Any],
                elapsed: float) -> tuple[TrialResult, Trajectory]:
        """An attempt whose worker never reported an outcome: always ``infra``, so the attempts policy retries it."""
        ray = self._ray
        if isinstance(exc, AttemptDeadlineError):
            info = TrialErrorInfo(error_class="infra", type=type(exc).__name__, message=str(exc), phase="executor")
            stop_reason = "deadline"
        elif isinstance(exc, ray.exceptions.RayTaskError) and not isinstance(exc, ray.exceptions.TaskCancelledError):
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            info = TrialErrorInfo(error_class="infra", type=type(cause).__name__, phase="executor",
                                  message=f"the Ray task{_where(worker)} raised: {cause}"[:4000])
            stop_reason = "worker_error"
        else:
            lost = WorkerLostError(f"the Ray worker{_where(worker)} running this attempt was lost "
                                   f"({type(exc).__name__}): {exc}")
            info = TrialErrorInfo(error_class="infra", type=type(lost).__name__, message=str(lost)[:4000],
                                  phase="executor")
            stop_reason = "worker_lost"
        result = plan.blank_result(error=info, timings={"total": round(elapsed, 4)}, stop_reason=stop_reason,
                                   finished_at=datetime.now(UTC).isoformat())
        return result, Trajectory(stop_reason=stop_reason)


def _where(worker: dict[str, Any]) -> str:
    if not worker:
        return ""
    return f" (pid {worker.get('pid')} on node {str(worker.get('node_id'))[:12]})"
