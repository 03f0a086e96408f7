"""The watch over a started agent: poll it until it ends, and how it ended; stop it, and everything it started, in
every case (also when the runtime cancels the run at its agent timeout)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar

from tackroom import Sandbox
from tackroom_agent_kit.control import AgentControl
from tackroom_agent_kit.options import AgentOptions
from tackroom_agent_kit.relay import ModelRelay

Ending = Literal["exited", "died", "max_turns", "model_errors", "hang", "timeout"]
"""How a watched run ended: the agent exited (``exited``) or died without an exit status (``died``), the relay refused
a call past the turn limit (``max_turns``), the endpoint failed ``max_model_errors`` calls (``model_errors``), nothing
was written and no model call was in flight for ``hang_timeout_sec`` (``hang``), or the deadline passed
(``timeout``)."""

T = TypeVar("T")


async def watch_run(sandbox: Sandbox, control: AgentControl, relay: ModelRelay, options: AgentOptions,
                deadline: float) -> Ending:
    """Poll the agent, quickly at first and then every ``poll_interval_sec``, until it ends (:data:`Ending`).

    A model call in flight is progress (a slow model is not a hang); so is any change in the size of the agent's
    output files. Raises :class:`~tackroom_agent_kit.AgentControlError` when the agent cannot be looked at."""
    last_sizes: tuple[int, ...] | None = None
    last_progress = time.monotonic()
    pause = 0.2
    while True:
        state = await control.poll(sandbox)
        now = time.monotonic()
        if state.exit_code is not None:
            return "exited"
        if not state.alive:
            return "died"
        if relay.limit_reached:
            return "max_turns"
        if relay.failures >= options.max_model_errors:
            return "model_errors"
        if state.sizes != last_sizes or relay.in_flight:
            last_sizes, last_progress = state.sizes, now
        if now >= deadline:
            return "timeout"
        if now - max(last_progress, relay.last_activity) >= options.hang_timeout_sec:
            return "hang"
        await asyncio.sleep(max(0.0, min(pause, deadline - now)))
        pause = min(pause * 1.5, options.poll_interval_sec)


async def stopped_after(sandbox: Sandbox, control: AgentControl, grace: int, work: Callable[[], Awaitable[T]]) -> T:
    """``await work()``, then stop the agent and every process it started, whatever happened: TERM, then KILL after
    ``grace`` seconds. Cancelled, it stops them with no grace (the runtime's agent timeout leaves no time for one, and
    nothing may outlive the run) and finishes the stop even if cancelled again."""
    try:
        result = await work()
    except asyncio.CancelledError:
        stop = asyncio.ensure_future(control.stop(sandbox, grace=0))
        try:
            await asyncio.shield(stop)
        except asyncio.CancelledError:
            await stop
        raise
    except BaseException:
        await control.stop(sandbox, grace)
        raise
    await control.stop(sandbox, grace)
    return result


async def run_watched(sandbox: Sandbox, control: AgentControl, relay: ModelRelay, options: AgentOptions,
                      deadline: float, start: Callable[[], Awaitable[None]]) -> Ending:
    """``await start()`` (which starts the agent with ``control``), :func:`watch_run` it until it ends, and stop it and
    everything it started (:func:`stopped_after`, with ``kill_grace_sec``)."""

    async def started_and_watched() -> Ending:
        await start()
        return await watch_run(sandbox, control, relay, options, deadline)

    return await stopped_after(sandbox, control, options.kill_grace_sec, started_and_watched)
