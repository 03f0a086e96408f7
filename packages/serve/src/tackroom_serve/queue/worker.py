"""The dispatcher: starts queued rollouts up to the service's ``concurrency`` and each batch's own
(``runtime.concurrency``, through its executor's ``max_in_flight`` as ``tackroom run`` counts it), oldest batch
first, and settles them: finished, cancelled, or (when the service stops) left for the next start to resume.

Claims, cancels, pauses and resumes take one lock, so a pause that has returned starts nothing more, and a cancel
finds every running rollout it names among the tasks here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from tackroom_serve.db.reads import Reader
from tackroom_serve.db.store import Claimed, Finished, Store
from tackroom_serve.queue.runner import BatchRunner, Runners, service_failure

log = logging.getLogger("tackroom.serve")

POLL_SEC = 1.0
"""How often the queue is looked at without a wake-up (a retry or resume from another path is seen this soon)."""
CLAIM_GATHER_SEC = 0.005


class Changes:
    """Wakes whoever waits for a batch's change (its results streams): take :meth:`current` before reading, then
    wait on it, so a change between the read and the wait is never missed. One event per batch: a finished rollout
    wakes only its own batch's streams."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def current(self, batch_id: str) -> asyncio.Event:
        return self._events.setdefault(batch_id, asyncio.Event())

    def notify(self, batch_id: str) -> None:
        event = self._events.pop(batch_id, None)
        if event is not None:
            event.set()


class Dispatcher:
    """Owns the running rollouts: ``running`` maps a rollout id to its claim and task."""

    def __init__(self, store: Store, reader: Reader, runners: Runners, *, concurrency: int,
                 changes: Changes | None = None) -> None:
        self.store = store
        self.reader = reader
        self.runners = runners
        self.concurrency = concurrency
        self.changes = changes or Changes()
        self.running: dict[str, tuple[Claimed, asyncio.Task[None]]] = {}
        self.lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._cancelling: dict[str, str] = {}
        self._loop: asyncio.Task[None] | None = None

    # -- the loop ----------------------------------------------------------------------------------
    def start(self) -> None:
        self._loop = asyncio.create_task(self._run_loop(), name="tackroom-serve-dispatcher")

    def wake(self) -> None:
        self._wake.set()

    async def _run_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_SEC)
            self._wake.clear()
            await asyncio.sleep(CLAIM_GATHER_SEC)  # rollouts finishing together are replaced in one claim
            try:
                await self.fill()
            except Exception:  # a database blip must not stop the service: the next round tries again
                log.exception("starting queued rollouts failed")

    def in_batch(self, batch_id: str) -> int:
        return sum(1 for claimed, _ in self.running.values() if claimed.batch_id == batch_id)

    async def fill(self) -> None:
        """Claim and start queued rollouts while there is room."""
        async with self.lock:
            for batch_id, concurrency in await asyncio.to_thread(self.store.runnable):
                free = self.concurrency - len(self.running)
                if free <= 0:
                    return
                runner = await self._runner(batch_id)
                if runner is None:
                    continue
                room = min(free, runner.max_in_flight(concurrency) - self.in_batch(batch_id))
                if room <= 0:
                    continue
                for claimed in await asyncio.to_thread(self.store.claim, batch_id, room):
                    task = asyncio.create_task(self._run(claimed, runner), name=f"rollout-{claimed.id}")
                    self.running[claimed.id] = (claimed, task)

    async def _runner(self, batch_id: str) -> BatchRunner | None:
        """The batch's runner; when it cannot be built, its queued rollouts fail with why (None)."""
        if batch_id in self.runners.open:
            return self.runners.open[batch_id]
        try:
            return await self.runners.get(batch_id, await asyncio.to_thread(self.reader.batch_config, batch_id))
        except Exception as exc:
            failed = service_failure(exc, "infra", "batch_start")
            count = await asyncio.to_thread(self.store.fail_queued, batch_id, failed)
            log.warning("batch %s cannot run (%s: %s); %d queued rollouts failed", batch_id, type(exc).__name__,
                        exc, count)
            self.changes.notify(batch_id)
            return None

    async def _run(self, claimed: Claimed, runner: BatchRunner) -> None:
        try:
            finished = await runner.run(claimed)
        except asyncio.CancelledError:
            note = self._cancelling.pop(claimed.id, None)
            if note is None:  # the service is stopping: the next start resumes this rollout
                self.running.pop(claimed.id, None)
                raise
            finished = Finished("cancelled", notes=[note])
        except Exception as exc:  # a bug or a dead executor: the rollout fails infra, the service goes on
            log.exception("rollout %s", claimed.id)
            finished = service_failure(exc)
        try:
            await asyncio.to_thread(self.store.finish, claimed, finished)
        finally:
            self.running.pop(claimed.id, None)
            self._cancelling.pop(claimed.id, None)
            self.changes.notify(claimed.batch_id)
            self.wake()
        if self.in_batch(claimed.batch_id):
            return
        async with self.lock:  # no claim meanwhile: a batch given new work keeps its runner
            if not self.in_batch(claimed.batch_id) and not await asyncio.to_thread(self.reader.unsettled,
                                                                                  claimed.batch_id):
                await self.runners.close(claimed.batch_id)

    # -- what clients ask --------------------------------------------------------------------------
    async def _stopping(self, ids: list[str], note: str) -> list[asyncio.Task[None]]:
        tasks = []
        for rollout_id in ids:
            entry = self.running.get(rollout_id)
            if entry is not None:
                self._cancelling[rollout_id] = note
                entry[1].cancel()
                tasks.append(entry[1])
        return tasks

    async def cancel_rollout(self, batch_id: str, rollout_id: str, note: str, wait_sec: float) -> str | None:
        """Cancel a queued or running rollout; returns its state before (None: unknown)."""
        async with self.lock:
            before = await asyncio.to_thread(self.store.cancel_queued, rollout_id, note)
            tasks = await self._stopping([rollout_id], note) if before == "running" else []
        self.changes.notify(batch_id)
        await _settled(tasks, wait_sec)
        return before

    async def cancel_batch(self, batch_id: str, note: str, wait_sec: float) -> None:
        async with self.lock:
            running = await asyncio.to_thread(self.store.cancel_batch, batch_id, note)
            tasks = await self._stopping(running, note)
        self.changes.notify(batch_id)
        await _settled(tasks, wait_sec)

    async def under_lock(self, call: Callable[..., Any], batch_id: str, *args: Any, **kwargs: Any) -> Any:
        """``call(batch_id, ...)`` (a store write) in a thread while no claim runs; then wake the loop and the
        batch's streams."""
        async with self.lock:
            result = await asyncio.to_thread(call, batch_id, *args, **kwargs)
        self.changes.notify(batch_id)
        self.wake()
        return result

    async def pause(self, batch_id: str, model_calls: str = "drain") -> None:
        """Start no more of the batch's rollouts; with ``model_calls`` ``finish`` or ``continue`` its policy
        gateway also holds their model calls for a weight update (see ``PauseRequest``): returns once none is on
        the engine."""
        await self.under_lock(self.store.batch_state, batch_id, "paused")
        gateway = self._gateway(batch_id)
        if model_calls != "drain" and gateway is not None:
            await gateway.pause(model_calls)

    async def resume(self, batch_id: str, policy_version: Any = ...) -> None:
        """Start the batch's rollouts again (``policy_version``: recorded on those started from now on; ``...``:
        unchanged); model calls its gateway held go on, their tokens tagged with the new version."""
        await self.under_lock(self.store.batch_state, batch_id, "active", policy_version=policy_version)
        gateway = self._gateway(batch_id)
        if gateway is not None:
            gateway.resume(policy_version if policy_version is not ... else None)

    def _gateway(self, batch_id: str) -> Any:
        runner = self.runners.open.get(batch_id)
        return runner.gateway if runner is not None else None

    async def stop(self) -> None:
        """Stop starting rollouts and cancel the running ones (their sandboxes are torn down); what was running
        stays ``running`` in the database, for the next start to resume."""
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
        tasks = [task for _, task in self.running.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.runners.close_all()


async def _settled(tasks: list[asyncio.Task[None]], wait_sec: float) -> None:
    """Give cancelled rollouts up to ``wait_sec`` to tear down and record it (the answer then shows it)."""
    if tasks:
        await asyncio.wait(tasks, timeout=wait_sec)
