"""One gateway session per trial attempt: how the trial runtime gives chat-only harnesses exact tokens.

``TrialPlugins.policy_for = GatewaySessions(gateway)``: each attempt gets a
fresh session (its own base URL, with the session's secret token in the path,
so the agent reaches only this session, and only while the attempt lasts), the
harness talks to it like any OpenAI endpoint, and afterwards the session's token
trajectory (prompt/completion ids, loss mask, logprobs) is merged into the
harness's trajectory. An engine error the session saw (context exceeded →
``model``; engine down, 429/5xx past the retries, a timeout, an engine request
still open when the agent's turn ended while the engine was not answering the
gateway's liveness probes → ``infra``) decides the class of a failed harness
run, so a dead or overloaded engine is retried rather than blamed on the model.
A request still open on an engine that answers its probes is the policy's own
long generation: no error, and the harness's (an agent timeout: ``model``) stands.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any, Protocol

from tackroom import Policy, PolicySession, TackroomError, Trajectory
from tackroom_gateway.sessions import SessionStore
from tackroom_gateway.tito import RecordedTurn


class SessionHost(Protocol):
    """What a trial session needs of its gateway (``PolicyGateway`` is one): a policy per session, and its store."""

    store: SessionStore

    def policy(self, session_id: str, **overrides: Any) -> Policy: ...


class GatewayTrialSession(PolicySession):
    """The policy of one attempt and how to finish its trajectory: a :class:`tackroom.PolicySession`."""

    def __init__(self, gateway: SessionHost, session_id: str, sampling: dict[str, Any], label: str | None) -> None:
        self.store = gateway.store
        self.session_id = session_id
        self.policy: Policy = gateway.policy(session_id, sampling=sampling, label=label, token_ids=False)

    async def settle(self) -> None:
        """One last liveness probe when the turn ended on an engine request no probe has judged yet
        (``SessionStore.settle``); the runtime awaits it before asking :meth:`error`."""
        await self.store.settle(self.session_id)

    def error(self) -> TackroomError | None:
        """The session's deciding error (``SessionStore.error``); ask before ``complete()``, which
        closes the session: an engine request still open now counts as an infra error when the engine is
        not answering its liveness probes, and as nothing (the model's own generation) when it is."""
        return self.store.error(self.session_id)

    def unrecovered_error(self) -> TackroomError | None:
        """The infra error the session ended on (an engine request open now, or the last one failed on infra
        with no turn after it), or None; see ``TitoSession.unrecovered_error``. For an attempt whose harness
        finished normally: its episode may have been cut short by the engine."""
        return self.store.unrecovered_error(self.session_id)

    def recorded_turns(self) -> list[RecordedTurn]:
        """The engine calls this session recorded so far, in order (each with the messages, tools and template
        options it was rendered from: ``RecordedTurn.context``); empty when the harness made none. Read it before
        :meth:`complete`, which closes the session. `tackroom collect` keeps demonstrations from it."""
        session = self.store.sessions.get(self.session_id)
        return list(session.turns) if session is not None else []

    async def complete(self, trajectory: Trajectory) -> Trajectory:
        """Merge the session's exact tokens into the harness's trajectory (the harness's own tokens win), with the
        session's notes about them (a rewritten history's branches, a turn cut at a weight update and continued,
        engine errors) after the harness's own."""
        recorded = self.store.close(self.session_id)
        if recorded is None or trajectory.turns:
            return trajectory
        merged = trajectory.model_copy(update={
            "turns": recorded.turns,
            "token_ids": recorded.token_ids,
            "loss_mask": recorded.loss_mask,
            "logprobs": recorded.logprobs,
            "messages": trajectory.messages or recorded.messages,
            "notes": [*trajectory.notes, *(n for n in recorded.notes if n not in trajectory.notes)],
        })
        merged.metrics.setdefault("turns", float(len(recorded.turns)))
        completion_tokens = sum(len(t.completion_ids) for t in recorded.turns)
        merged.metrics.setdefault("assistant_tokens_per_turn", completion_tokens / max(1, len(recorded.turns)))
        return merged


class GatewaySessions:
    """``policy_for`` for :class:`tackroom_app.TrialPlugins`: a fresh gateway session per attempt."""

    def __init__(self, gateway: SessionHost, *, sampling: dict[str, Any] | None = None,
                 label: str | None = None) -> None:
        self.gateway = gateway
        self.sampling = sampling or {}
        self.label = label

    @contextlib.asynccontextmanager
    async def __call__(self, trial: Any) -> AsyncIterator[GatewayTrialSession]:
        session = GatewayTrialSession(self.gateway, f"{trial.id}-{uuid.uuid4().hex[:8]}", self.sampling, self.label)
        try:
            yield session
        finally:
            self.gateway.store.close(session.session_id)
