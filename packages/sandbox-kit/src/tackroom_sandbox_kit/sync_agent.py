"""Running a synchronous agent (most Python agents are) inside tackroom's async harness contract.

A harness's ``run`` is a coroutine on the trial's event loop and its :class:`~tackroom.Sandbox` is async; a
blocking agent loop (model call, command, model call …) cannot run on that loop. :func:`run_sync_agent` runs
it in a worker thread and hands it a :class:`SyncSandbox`: the same sandbox, each call bridged to the trial's
loop with :func:`asyncio.run_coroutine_threadsafe` and bounded by the call's own timeout.

The thread cannot be killed, so it is stopped cooperatively: at the deadline, or when the harness's ``run``
is cancelled (the runtime's agent timeout), the facade is stopped. Sandbox calls in flight are cancelled and
awaited before :func:`run_sync_agent` returns or raises, and every later call raises :class:`AgentStopped`, so
the agent thread unwinds at its next sandbox call and never runs a sandbox command after the trial's turn
ended. Blocking work of the agent's own between sandbox calls (a model request) should call
:meth:`SyncSandbox.raise_if_stopped` first.

```python
async def run(self, task, sandbox, policy):
    agent = MyAgent(policy.base_url)
    return await run_sync_agent(lambda box: agent.solve(task.instruction, box), sandbox, deadline=task.deadline)
```
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from tackroom import DEFAULT_EXEC_TIMEOUT, ExecResult, ModelError, Sandbox, SandboxSpec, SandboxTimeoutError

T = TypeVar("T")

CALL_GRACE_SEC = 30.0
"""How long past a call's own timeout the thread waits for the sandbox to answer: the sandbox enforces the
timeout itself (and raises :class:`~tackroom.SandboxTimeoutError`); this bounds a sandbox that does not."""
STOP_TIMEOUT_SEC = 30.0
"""How long a stop waits for the sandbox calls it cancelled to finish (a provider kills the command first)."""


class AgentStopped(BaseException):
    """Raised in the agent thread by a :class:`SyncSandbox` call after the run was stopped (deadline, cancellation).

    A ``BaseException``, as :class:`asyncio.CancelledError` is, so that an agent's ``except Exception`` (which
    turns a failed command into an observation) does not swallow it and keep the thread going.
    """


class AgentDeadlineError(ModelError):
    """The agent was still working at its deadline and was stopped; what it left in the sandbox is graded.

    Not a ``TimeoutError``: the runtime turns those into its own error and drops a trajectory attached here
    (``trajectory``, which a harness sets to what the agent did before re-raising).
    """

    def __init__(self, message: str, trajectory: Any = None) -> None:
        super().__init__(message)
        self.trajectory = trajectory


class SyncSandbox:
    """A blocking facade over an async :class:`~tackroom.Sandbox`, for use from a worker thread.

    Each method has the sandbox's signature and errors; it runs the sandbox's coroutine on ``loop`` and waits
    at most its ``timeout`` (plus :data:`CALL_GRACE_SEC`). Calling it from the loop's own thread would deadlock
    and raises ``RuntimeError``; calling it after :meth:`stop` raises :class:`AgentStopped`.
    """

    def __init__(self, sandbox: Sandbox, loop: asyncio.AbstractEventLoop) -> None:
        self.sandbox = sandbox
        self.loop = loop
        self._stopped = threading.Event()
        self._in_flight: set[asyncio.Task[Any]] = set()  # touched only on the loop's thread

    @property
    def spec(self) -> SandboxSpec:
        return self.sandbox.spec

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def raise_if_stopped(self) -> None:
        """Raise :class:`AgentStopped` once the run was stopped: an agent calls it before its own blocking work."""
        if self._stopped.is_set():
            raise AgentStopped("the agent's run was stopped (deadline or cancellation); no more sandbox calls")

    # -- the sandbox's methods ------------------------------------------------------------------------------
    def exec(self, cmd: str | list[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
             timeout: float = DEFAULT_EXEC_TIMEOUT, stdin: str | bytes | None = None) -> ExecResult:
        """:meth:`Sandbox.exec <tackroom.Sandbox.exec>`, blocking."""
        return self._call(lambda: self.sandbox.exec(cmd, cwd=cwd, env=env, timeout=timeout, stdin=stdin),
                          timeout, "exec")

    def read_file(self, path: str, *, timeout: float = 60.0) -> bytes:
        """:meth:`Sandbox.read_file <tackroom.Sandbox.read_file>`, blocking."""
        return self._call(lambda: self.sandbox.read_file(path, timeout=timeout), timeout, f"read_file({path!r})")

    def write_file(self, path: str, content: str | bytes, *, timeout: float = 60.0) -> None:
        """:meth:`Sandbox.write_file <tackroom.Sandbox.write_file>`, blocking."""
        self._call(lambda: self.sandbox.write_file(path, content, timeout=timeout), timeout, f"write_file({path!r})")

    def upload(self, source: Path, dest: str, *, timeout: float = 120.0) -> None:
        """:meth:`Sandbox.upload <tackroom.Sandbox.upload>`, blocking."""
        self._call(lambda: self.sandbox.upload(source, dest, timeout=timeout), timeout, f"upload to {dest!r}")

    def download(self, source: str, dest: Path, *, timeout: float = 120.0) -> None:
        """:meth:`Sandbox.download <tackroom.Sandbox.download>`, blocking."""
        self._call(lambda: self.sandbox.download(source, dest, timeout=timeout), timeout, f"download of {source!r}")

    # -- the bridge -----------------------------------------------------------------------------------------
    def _call(self, make: Callable[[], Awaitable[T]], timeout: float, what: str) -> T:
        self.raise_if_stopped()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            raise RuntimeError(f"SyncSandbox.{what} was called on the event loop's own thread, where it would wait "
                               "for itself forever: call it from the agent's worker thread (run_sync_agent)")
        future = asyncio.run_coroutine_threadsafe(self._tracked(make), self.loop)
        try:
            return future.result(timeout + CALL_GRACE_SEC)
        except concurrent.futures.CancelledError:
            self.raise_if_stopped()  # cancelled by stop(): the agent unwinds
            raise
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise SandboxTimeoutError(f"the sandbox did not answer {what} within {timeout + CALL_GRACE_SEC:g}s "
                                      f"(its timeout {timeout:g}s plus {CALL_GRACE_SEC:g}s)") from exc

    async def _tracked(self, make: Callable[[], Awaitable[T]]) -> T:
        """On the loop: refuse once stopped, else run the call where :meth:`stop` can cancel and await it."""
        if self._stopped.is_set():
            raise asyncio.CancelledError  # stop() ran between the thread's check and this task's start
        task = asyncio.current_task()
        assert task is not None
        self._in_flight.add(task)
        try:
            return await make()
        finally:
            self._in_flight.discard(task)

    async def stop(self, timeout: float = STOP_TIMEOUT_SEC) -> None:
        """Refuse every further call, cancel the calls in flight and wait (at most ``timeout``) until they ended.

        Call it on the loop's thread. Idempotent; never raises (a call that failed while stopping is the agent
        thread's to see).
        """
        self._stopped.set()
        calls = [task for task in self._in_flight if not task.done()]
        for task in calls:
            task.cancel()
        if calls:
            await asyncio.wait(calls, timeout=timeout)


async def run_sync_agent(agent: Callable[[SyncSandbox], T], sandbox: Sandbox, *, deadline: float | None = None,
                         unwind_timeout: float = 5.0, name: str = "tackroom-sync-agent") -> T:
    """Run the blocking ``agent(sync_sandbox)`` in a worker thread and return what it returns.

    ``deadline`` is wall-clock time (``time.time()``, as :attr:`tackroom.Task.deadline`); ``None``: no deadline
    but cancellation. At the deadline the facade is stopped (see :class:`SyncSandbox`) and
    :class:`AgentDeadlineError` (``model``) is raised; when this coroutine is cancelled the facade is stopped and
    the cancellation goes on. Either way the sandbox calls in flight have ended before it returns, and it waits up
    to ``unwind_timeout`` for the thread to unwind (it may be in a model call, which only its own timeout ends).
    An exception raised in the thread is re-raised here with its traceback (the thread's frames included).

    The thread is a daemon of its own, not the loop's default executor: ``asyncio.run`` joins that executor at
    exit, so an agent stuck in a long model call would hold up the process.
    """
    loop = asyncio.get_running_loop()
    facade = SyncSandbox(sandbox, loop)
    done: asyncio.Future[None] = loop.create_future()
    outcome: dict[str, Any] = {}

    def finished() -> None:
        if not done.done():
            done.set_result(None)

    def work() -> None:
        try:
            outcome["value"] = agent(facade)
        except BaseException as exc:  # AgentStopped too: the caller decides what a stopped agent means
            outcome["error"] = exc
        finally:
            try:
                loop.call_soon_threadsafe(finished)
            except RuntimeError:
                pass  # the loop is closed: nobody waits for this thread any more

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    timeout = None if deadline is None else max(deadline - time.time(), 0.0)
    try:
        await asyncio.wait_for(asyncio.shield(done), timeout)
    except TimeoutError:
        await _stop(facade, done, unwind_timeout)
        raise AgentDeadlineError(f"the agent was still working at its deadline ({timeout:.0f}s after it started) "
                                 "and was stopped") from None
    except asyncio.CancelledError:
        await _stop(facade, done, unwind_timeout)
        raise
    if "error" in outcome:
        error = outcome.pop("error")
        try:
            raise error  # the thread's traceback stays on it; this frame is added on top
        finally:
            del error  # no reference cycle through this frame
    return outcome["value"]


async def _stop(facade: SyncSandbox, done: asyncio.Future[None], unwind_timeout: float) -> None:
    """Stop the facade and give the thread a moment to unwind, shielded from a second cancellation: nothing the
    agent started in the sandbox may outlive the run."""
    async def stop_and_wait() -> None:
        await facade.stop()
        await asyncio.wait([done], timeout=unwind_timeout)

    stopping = asyncio.ensure_future(stop_and_wait())
    try:
        await asyncio.shield(stopping)
    except asyncio.CancelledError:
        await stopping
        raise

