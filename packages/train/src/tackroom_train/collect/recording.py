"""What the teacher's episodes are read from: the engine calls tackroom itself recorded, never the agent's transcript.

An :class:`EngineCall` is one call to the teacher's engine with its exact ids. Two recorders are trusted:

- the policy gateway, for a harness routed through it: :class:`GatewayRecorder` wraps the run's per-attempt
  gateway sessions and keeps each trial's record as the gateway made it (the rendered prompt ids, the ids the
  engine returned, the request's messages and tools, the reply the gateway parsed), read from the session itself
  before it closes, so nothing the harness returned in its trajectory can stand in for it;
- a harness that keeps its own token accounting (capability ``token_ids``: it calls ``/v1/completions`` with ids
  and records the engine's answers), through :func:`calls_from_turns`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from tackroom import TackroomError, TokenTurn, Trajectory
from tackroom_gateway import GatewayTrialSession


@dataclass(frozen=True)
class EngineCall:
    """One engine call: the exact prompt and completion ids, its branch and the call it extends (``parent``)."""

    index: int
    prompt_ids: list[int]
    completion_ids: list[int]
    branch: int = 0
    parent: int | None = None
    messages: list[dict[str, Any]] | None = None
    """The request's chat messages (the gateway's record only)."""
    reply: dict[str, Any] | None = None
    """The assistant message the gateway answered with (the gateway's record only)."""
    tools: list[dict[str, Any]] | None = None
    template_kwargs: dict[str, Any] | None = None
    tools_known: bool = False
    """Whether ``tools``/``template_kwargs`` are what the request carried (the gateway's record), not unknown."""


@dataclass
class GatewayRecorder:
    """``TrialPlugins.policy_for`` around the gateway's own: each trial's gateway record, by trial id (the last
    attempt's; an attempt that made no engine call leaves an empty list)."""

    sessions: Any
    records: dict[str, list[EngineCall]] = field(default_factory=dict)
    readable: bool = True
    """False once a session was met whose record this recorder cannot read (not tackroom-gateway's)."""

    @contextlib.asynccontextmanager
    async def __call__(self, trial: Any) -> AsyncIterator[Any]:
        async with self.sessions(trial) as session:
            yield _RecordingSession(session, trial.id, self)


class _RecordingSession:
    """A gateway session that hands its record to the recorder before it is merged and closed."""

    def __init__(self, session: Any, trial_id: str, recorder: GatewayRecorder) -> None:
        self.session, self.trial_id, self.recorder = session, trial_id, recorder
        self.policy = session.policy

    async def settle(self) -> None:
        await self.session.settle()

    def error(self) -> TackroomError | None:
        return self.session.error()

    def unrecovered_error(self) -> TackroomError | None:
        return self.session.unrecovered_error()

    async def complete(self, trajectory: Trajectory) -> Trajectory:
        calls = calls_of_session(self.session)
        if calls is None:
            self.recorder.readable = False
            self.recorder.records.pop(self.trial_id, None)
        else:
            self.recorder.records[self.trial_id] = calls
        return await self.session.complete(trajectory)


def calls_of_session(session: Any) -> list[EngineCall] | None:
    """The engine calls a ``tackroom_gateway.GatewayTrialSession`` recorded (``recorded_turns()``); None when
    ``session`` is not one."""
    if not isinstance(session, GatewayTrialSession):
        return None
    calls = []
    for turn in session.recorded_turns():
        tools, kwargs, known = _context(getattr(turn, "context", None))
        calls.append(EngineCall(index=turn.index, prompt_ids=list(turn.prompt_ids),
                                completion_ids=list(turn.completion_ids), branch=turn.branch, parent=turn.parent,
                                messages=list(turn.messages), reply=dict(turn.reply), tools=tools,
                                template_kwargs=kwargs, tools_known=known))
    return calls


def _context(context: Any) -> tuple[list[dict[str, Any]] | None, dict[str, Any] | None, bool]:
    """A turn's tools and template options, from the key the gateway matches turns by (``[tools, kwargs]``)."""
    try:
        tools, kwargs = json.loads(context)
    except (TypeError, ValueError):
        return None, None, False
    if not (tools is None or isinstance(tools, list)) or not (kwargs is None or isinstance(kwargs, dict)):
        return None, None, False
    return tools, kwargs, True


def calls_from_turns(turns: list[TokenTurn]) -> list[EngineCall]:
    """A token-level harness's recorded turns as engine calls; a turn's parent is the latest earlier turn whose
    prompt and completion its prompt extends (the same branch's first), else none (a fresh segment)."""
    calls: list[EngineCall] = []
    for k, turn in enumerate(turns):
        parent = None
        for earlier in sorted(calls[::-1], key=lambda c: c.branch != turn.branch):
            done = earlier.prompt_ids + earlier.completion_ids
            if turn.prompt_ids[: len(done)] == done and len(turn.prompt_ids) >= len(done):
                parent = earlier.index
                break
        calls.append(EngineCall(index=k, prompt_ids=list(turn.prompt_ids), completion_ids=list(turn.completion_ids),
                                branch=turn.branch, parent=parent))
    return calls
