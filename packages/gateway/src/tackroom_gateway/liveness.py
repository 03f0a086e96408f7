"""Whether the engine is answering: what decides if a request still open when the agent's turn ended is infra.

An engine request can be open at the end of a turn for two reasons: the engine is
stuck (infra: retry the trial) or the policy is generating a long answer on a
healthy engine (the model's own failure). The agent's behaviour cannot tell them
apart, and an RL policy that could turn its failures into infra by stalling would
learn to; so the engine is asked instead.

While requests wait on the engine and it has produced nothing (no completion, no
streamed chunk, no probe answer) for ``probe_interval_s``, :meth:`EngineLiveness.watch`
sends it a probe, a 1-token completion with a ``probe_timeout_s`` limit and no
retries (:meth:`EngineClient.probe`), one at a time for the whole gateway. The
engine counts as **not answering** while its newest probe failed and it has
produced nothing since that probe was sent (:meth:`EngineLiveness.failure`).

The evidence is gathered *before* the turn ends, not after: the runtime asks a
session for its error synchronously, right after the harness stops and often
before the gateway has even seen the agent's connection close, so a probe sent
at that moment could not be answered in time, and waiting for it would block the
event loop every trial shares. A failed probe that comes back long past its limit
(:meth:`EngineLiveness.stall_limit_s`) saw this process's own event loop stand
still, not the engine; it is set aside (counted in ``stalls``). A hang that begins less than about
``probe_interval_s + probe_timeout_s`` before the turn ends is therefore not seen.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from tackroom_gateway.engine_client import EngineClient

log = logging.getLogger("tackroom_gateway")


@dataclass(frozen=True)
class ProbeOutcome:
    """One finished liveness probe (``time.monotonic()`` times)."""

    sent_at: float
    finished_at: float
    error: str | None
    """None when the engine answered with a completion; else what went wrong."""


class EngineLiveness:
    """The gateway's view of whether its engine is answering, and the probes that keep it current."""

    def __init__(self, interval_s: float, timeout_s: float) -> None:
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.last_answer_at: float | None = None
        """When the engine last produced something: a completion, a streamed chunk or a probe's answer."""
        self.last_probe: ProbeOutcome | None = None
        self.probe_sent_at: float | None = None
        """When the probe in flight (if any) was sent."""
        self.probes = 0
        self.stalls = 0
        """Probes that came back so far past their limit that they say nothing about the engine."""

    def stall_limit_s(self) -> float:
        """A failed probe that took longer than this saw this process stall, not the engine."""
        return 2 * self.timeout_s + 1.0

    def answered(self) -> None:
        """The engine just produced output."""
        self.last_answer_at = time.monotonic()

    def failure(self) -> str | None:
        """Why the engine counts as not answering now, or None when it answers (or nothing says it does not):
        its newest probe failed, and it has produced nothing since that probe was sent."""
        p = self.last_probe
        if p is None or p.error is None:
            return None
        if self.last_answer_at is not None and self.last_answer_at >= p.sent_at:
            return None
        ago = time.monotonic() - p.sent_at
        return f"a 1-token completion sent {ago:.1f}s ago got {p.error}"

    def next_probe_at(self, oldest_open: float) -> float:
        """When the next probe is due, given the oldest request waiting on the engine since ``oldest_open``."""
        p = self.last_probe
        if p is not None and self.failure() is not None:
            return p.finished_at + self.interval_s  # keep asking an engine that failed, at a calm pace
        quiet_since = max(oldest_open, self.last_answer_at or oldest_open, p.finished_at if p else oldest_open)
        return quiet_since + self.interval_s

    async def probe(self, client: EngineClient, prompt_ids: list[int]) -> ProbeOutcome:
        """Send one probe and record its outcome; never raises (but cancellation)."""
        sent = self.probe_sent_at = time.monotonic()
        self.probes += 1
        try:
            error = await client.probe(prompt_ids, self.timeout_s)
        finally:
            self.probe_sent_at = None
        was_failing = self.failure() is not None
        outcome = ProbeOutcome(sent_at=sent, finished_at=time.monotonic(), error=error)
        took = outcome.finished_at - sent
        if error is not None and took > self.stall_limit_s():
            # A probe's deadline is checked by this process's event loop: one that comes back this late means
            # the loop itself stood still (a long synchronous call somewhere, the host paused), not that the
            # engine was silent, so it is no evidence either way. Counting it would turn the stall of our own
            # process (which code in the trial can cause) into infra for every trial waiting at that moment.
            self.stalls += 1
            log.warning("gateway: a liveness probe came back after %.1fs, past its %gs limit: this process's "
                        "event loop stalled; the probe does not count", took, self.timeout_s)
            return outcome
        self.last_probe = outcome
        if error is None:
            self.answered()
            if was_failing:
                log.warning("gateway: the engine answers liveness probes again")
        elif not was_failing:
            log.warning("gateway: the engine did not answer a liveness probe: %s", error)
        return outcome

    async def watch(self, client: Callable[[], EngineClient | None], oldest_open: Callable[[], float | None],
                    prompt_ids: list[int]) -> None:
        """Probe as due while any request waits on the engine; returns once none does (or the client is gone).
        Never raises (but cancellation): a broken watch must not break the gateway."""
        try:
            while True:
                oldest = oldest_open()
                engine = client()
                if oldest is None or engine is None:
                    return
                wait = self.next_probe_at(oldest) - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                    continue
                await self.probe(engine, prompt_ids)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("gateway: the engine liveness watch failed: %s: %s", type(exc).__name__, exc)
