"""Weight updates under a running gateway: its model calls paused, then resumed on a new policy version.

A trainer (or ``tackroom serve``) calls :meth:`WeightGate.pause` before it changes the engine's weights and
:meth:`WeightGate.resume` with the new version after. While paused, an engine request that has not been sent
waits (new model calls, and continuations); what happens to those already on the engine is the pause's mode:

* ``finish``: they complete on the old weights, and ``pause`` returns once they have (the update waits for them);
* ``continue``: they are cut at once (``pause`` returns when they have let go of the engine). A streamed engine
  request keeps what it sampled (ids, logprobs, text already sent to the client); once resumed it goes on with a
  new engine request whose prompt is the call's prompt ids + that prefix (token ids, never re-tokenized) and whose
  ``max_tokens`` is what is left. The client sees one answer: its stream only stalls while the update runs.
  A non-streamed engine answer holds nothing until it is whole, so a cut one is sent again whole on the new
  weights. A call sampled under a grammar (a forced tool call, structured outputs) is never cut: a continuation
  would restart the grammar inside the prefix; it finishes on the old weights, as in ``finish``.

Every token is tagged with the version it was sampled under (the engine's own stamp when it gives one, else the
version of the last :meth:`~WeightGate.resume`); a turn whose tokens span versions records them per token
(``TokenTurn.token_versions``). A model call that waits for a resume waits at most ``wait_s`` (the engine's read
timeout: the longest the gateway waits for the next piece of an answer), then fails as an
:class:`~tackroom_gateway.errors.EngineTimeoutError` (infra).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import BaseModel

from tackroom_gateway.engine_client import EngineChunk, EngineClient, EngineCompletion
from tackroom_gateway.errors import BadRequestError, EngineTimeoutError
from tackroom_gateway.streaming import CANCELLED, END, pump_stream

WeightUpdateMode = Literal["finish", "continue"]
MODES: tuple[str, ...] = get_args(WeightUpdateMode)


def weight_update_mode(name: str) -> WeightUpdateMode:
    """``name`` as a mode; a wrong one is a :class:`BadRequestError` naming the modes there are."""
    if name not in MODES:
        raise BadRequestError(f"no weight-update mode {name!r}; the modes are {', '.join(MODES)} "
                              "(finish: calls on the engine complete on the old weights; continue: they are cut and "
                              "continued from what they sampled on the new ones)")
    return name  # type: ignore[return-value]


class WeightUpdateState(BaseModel):
    """Where a gateway stands with weight updates (``GET /weights``, and what pause and resume answer)."""

    paused: bool
    mode: WeightUpdateMode | None = None
    """The running pause's mode (None: not paused)."""
    policy_version: int | None = None
    """The version the last resume named: tokens sampled from then on are tagged with it (None: not known)."""
    on_engine: int = 0
    """Engine requests running now."""
    waiting: int = 0
    """Model calls waiting for a resume."""


@dataclass(eq=False)
class _OnEngine:
    """One engine request let through the gate: the version it samples with, whether a pause may cut it, and the
    task doing it (a ``continue`` pause cancels that task)."""

    version: int | None
    cuttable: bool
    work: asyncio.Future[Any] | None = None
    was_cut: bool = False

    def cut(self) -> None:
        self.was_cut = True
        if self.work is not None:
            self.work.cancel()


class WeightGate:
    """The weight-update control of one gateway: see the module docstring."""

    def __init__(self, *, wait_s: float, policy_version: int | None = None) -> None:
        self.wait_s = wait_s
        self.policy_version = policy_version
        self.mode: WeightUpdateMode | None = None
        self._open = asyncio.Event()
        self._open.set()
        self._on_engine: set[_OnEngine] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._waiting = 0

    @property
    def paused(self) -> bool:
        return not self._open.is_set()

    def holding(self) -> str | None:
        """Why model calls wait on the gateway rather than the engine now (paused, with calls waiting), or None: a
        turn that ends waiting on a held call ended on the machinery, not on the model (``TitoSession``'s
        ``engine_failure``)."""
        if self.paused and self._waiting:
            return (f"the gateway is paused for a weight update ({self.mode} mode), {self._waiting} model call(s) "
                    "waiting for the resume")
        return None

    def state(self) -> WeightUpdateState:
        return WeightUpdateState(paused=self.paused, mode=self.mode, policy_version=self.policy_version,
                                 on_engine=len(self._on_engine), waiting=self._waiting)

    # -- the trainer's side ------------------------------------------------------------------------
    async def pause(self, mode: str = "finish") -> WeightUpdateState:
        """Hold every engine request not yet sent; ``mode`` says what becomes of those on the engine. Returns once
        none is on the engine (``finish``: they completed; ``continue``: they were cut, but for a grammar's)."""
        self.mode = weight_update_mode(mode)
        self._open.clear()
        if self.mode == "continue":
            for request in list(self._on_engine):
                if request.cuttable:
                    request.cut()
        await self._idle.wait()
        return self.state()

    def resume(self, policy_version: int | None = None) -> WeightUpdateState:
        """Let the held model calls go on, sampling (and tagged) with ``policy_version`` (None: the version stays);
        also names the version when nothing was paused."""
        if policy_version is not None:
            self.policy_version = policy_version
        self.mode = None
        self._open.set()
        return self.state()

    # -- the model calls' side -----------------------------------------------------------------------
    async def _admit(self, cuttable: bool) -> _OnEngine:
        """Wait while paused (at most ``wait_s``), then count an engine request on the engine."""
        if self.paused:
            self._waiting += 1
            try:
                async with asyncio.timeout(self.wait_s):
                    while self.paused:  # a pause may come again between the resume and this call's turn
                        await self._open.wait()
            except TimeoutError:
                raise EngineTimeoutError(
                    f"the gateway was paused for a weight update and no resume came within {self.wait_s:g}s (the "
                    "engine's read timeout); resume it (PolicyGateway.resume, POST /weights/resume)") from None
            finally:
                self._waiting -= 1
        request = _OnEngine(self.policy_version, cuttable)
        self._on_engine.add(request)
        self._idle.clear()
        return request

    def _done(self, request: _OnEngine) -> None:
        self._on_engine.discard(request)
        if not self._on_engine:
            self._idle.set()

    async def complete(self, engine: EngineClient, body: dict[str, Any], *, cuttable: bool) -> EngineCompletion:
        """``engine.complete(body)`` through the gate; a cut one is sent again whole once resumed."""
        while True:
            request = await self._admit(cuttable)
            request.work = answer = asyncio.ensure_future(engine.complete(body))
            try:
                await asyncio.wait({answer})
            finally:
                if not answer.done():  # this call itself was cancelled
                    answer.cancel()
                    await asyncio.wait({answer})
                self._done(request)
            if not (answer.cancelled() and request.was_cut):
                completion = answer.result()
                if completion.policy_version is None:
                    completion.policy_version = request.version
                return completion

    async def stream(self, engine: EngineClient, body: dict[str, Any], *, cuttable: bool) -> AsyncIterator[EngineChunk]:
        """``engine.stream(body)`` through the gate, each chunk tagged with its version; a cut one is continued
        from its sampled prefix once resumed (see the module docstring)."""
        prompt = list(body["prompt"])
        budget: int | None = body.get("max_tokens")
        prefix: list[int] = []
        while True:
            request = await self._admit(cuttable)
            sent = prompt + prefix
            part = dict(body, prompt=sent)
            if prefix:
                if budget is not None:
                    part["max_tokens"] = budget - len(prefix)
                if body.get("min_tokens"):
                    part["min_tokens"] = max(0, body["min_tokens"] - len(prefix))
            # a reader moves the engine's stream into a queue (a cut cancels it: CANCELLED ends what came), and what
            # is there goes on at once: chunks that came together leave together, for the chat handler's one event
            queue: asyncio.Queue[Any] = asyncio.Queue()
            request.work = reader = asyncio.ensure_future(pump_stream(engine.stream(part), queue))
            ended = was_cut = False
            try:
                while not was_cut:
                    items = [await queue.get()]
                    while not queue.empty():
                        items.append(queue.get_nowait())
                    for item in items:
                        if item is END:
                            return
                        if item is CANCELLED:  # cut: the engine request is closed; what came before is kept
                            was_cut = True
                            break
                        if isinstance(item, BaseException):
                            raise item
                        if prefix and item.prompt_ids == sent:
                            item.prompt_ids = prompt  # the continuation echoes the call's prompt + its prefix
                        item.policy_version = request.version
                        prefix.extend(item.token_ids)
                        ended = ended or item.finish_reason is not None
                        yield item
            finally:
                if not reader.done():  # this stream itself was cancelled or closed
                    reader.cancel()
                    await asyncio.wait({reader})
                self._done(request)
            if ended:  # the cut came after the engine's last piece: the answer is whole
                return
            if budget is not None and len(prefix) >= budget:
                yield EngineChunk.model_construct(text="", token_ids=[], logprobs=[], tokens=[], top_logprobs=[],
                                                  prompt_ids=None, finish_reason="length", stop_reason=None,
                                                  policy_version=request.version)
                return


def turn_versions(versions: list[int | None]) -> tuple[int | None, list[int] | None]:
    """A turn's ``policy_version`` (its first token's) and ``token_versions`` (only when its tokens span versions,
    each known) from the version of each completion token."""
    first = versions[0] if versions else None
    known = [v for v in versions if v is not None]
    if len(known) == len(versions) and len(set(known)) > 1:
        return first, known
    return first, None
