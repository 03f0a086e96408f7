"""The gateway's sessions: one :class:`~tackroom_gateway.tito.TitoSession` per agent conversation, reached at
``/sessions/{sid}/{token}/v1``, and the watch over the engine requests they wait on.

:class:`SessionStore` opens, finds, reads, settles and closes sessions; while any of them waits on the engine it
keeps the engine liveness watch running (:mod:`tackroom_gateway.liveness`), which decides whether a request
still open when a turn ended is infra."""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

from tackroom import TackroomError, Trajectory
from tackroom_gateway.backend import EngineBackend
from tackroom_gateway.errors import BadRequestError, GatewayError, SessionNotFoundError
from tackroom_gateway.tito import OpenRequest, SessionSummary, TitoSession

SESSION_ID = re.compile(r"(?!\.+$)[A-Za-z0-9_.-]{1,512}")
"""What a session id may be: it is a URL path segment (so not ``.`` or ``..``)."""


class SessionStore:
    """The sessions of one gateway, by id, over its :class:`~tackroom_gateway.backend.EngineBackend`.

    ``stopping`` is set while the gateway stops: no new liveness watch starts and chat requests are refused."""

    def __init__(self, backend: EngineBackend) -> None:
        self.backend = backend
        self.sessions: dict[str, TitoSession] = {}
        self.stopping = False
        self._watch: asyncio.Task[None] | None = None

    # -- opening, finding, reading ----------------------------------------------------------
    def open(self, session_id: str | None = None) -> TitoSession:
        """The session with this id, created (with a fresh token) if there is none; a random id when None."""
        sid = session_id if session_id is not None else uuid.uuid4().hex
        if not SESSION_ID.fullmatch(sid):
            raise BadRequestError(
                f"session id {sid[:80]!r} is not 1-512 characters of letters, digits, '_', '.' and '-' (nor only dots)"
            )
        s = self.sessions.get(sid)
        if s is None:
            if self.backend.template is None:
                raise GatewayError("gateway not prepared: await gateway.start() before opening sessions")
            s = self.sessions[sid] = TitoSession(sid, self.backend.template, engine_failure=self.engine_failure)
        return s

    def engine_failure(self) -> str | None:
        """Why a model call cannot be answered now: held by a pause for a weight update, or the engine not answering
        its liveness probes (``EngineLiveness.failure``); None when neither."""
        return self.backend.weights.holding() or self.backend.liveness.failure()

    def get(self, session_id: str) -> TitoSession:
        """The session with this id; :class:`SessionNotFoundError` listing the ids there are."""
        try:
            return self.sessions[session_id]
        except KeyError:
            raise SessionNotFoundError(
                f"no session {session_id!r}; sessions so far: {', '.join(sorted(self.sessions)) or 'none'}"
            ) from None

    def summaries(self) -> list[SessionSummary]:
        return [
            SessionSummary(session_id=sid, turns=len(s.turns), branches=len(s.tips), open_requests=len(s.inflight),
                           errors=[str(e) for e in s.errors])
            for sid, s in self.sessions.items()
        ]

    def trajectory(self, session_id: str, branch: int | None = None) -> Trajectory:
        """The session's turns and the flattened tokens of ``branch`` (default: the newest turn's branch)."""
        return self.get(session_id).trajectory(branch)

    # -- the verdict on a session's engine ----------------------------------------------------
    def error(self, session_id: str) -> TackroomError | None:
        """The classified error that should decide the trial (see ``TitoSession.worst_error``), or None.

        An engine request still open when this is asked (the agent's turn ended while
        the engine was working) is an infra error if the engine is not answering its
        liveness probes, and nothing (the model's own long generation) if it is.
        """
        s = self.sessions.get(session_id)
        return s.worst_error() if s else None

    def unrecovered_error(self, session_id: str) -> TackroomError | None:
        """The infra error the session ended on (``TitoSession.unrecovered_error``), or None."""
        s = self.sessions.get(session_id)
        return s.unrecovered_error() if s else None

    async def settle(self, session_id: str) -> None:
        """Before :meth:`error` is asked at the end of a turn: when an engine request of the session was
        open at the end (still open, or cut off then) and nothing has shown since it was sent whether the engine
        answers (no probe, no output), send one last probe and wait for it (``probe_timeout_s`` at most).

        Without it a turn shorter than ``probe_interval_s`` that ends waiting on a silent engine would leave no
        verdict, and the agent's timeout would count as the model's failure; with it, a silent engine is
        ``infra`` at any agent timeout."""
        s = self.sessions.get(session_id)
        backend = self.backend
        if s is None or backend.engine is None or backend.template is None:
            return
        since = s.unsettled_since()
        if since is None:
            return
        p, answered = backend.liveness.last_probe, backend.liveness.last_answer_at
        if (p is not None and p.sent_at >= since) or (answered is not None and answered >= since):
            return  # a probe sent, or output produced, after the request went out: the verdict exists
        await backend.liveness.probe(backend.engine, backend.probe_prompt())

    def close(self, session_id: str) -> Trajectory | None:
        """Forget a session (its URL stops working, its open engine requests are cut off); returns its
        trajectory (None if it never finished a turn)."""
        s = self.sessions.pop(session_id, None)
        if s is None:
            return None
        s.cancel_open_requests("the session was closed")
        return s.trajectory() if s.turns else None

    # -- engine requests in flight and the liveness watch -------------------------------------------
    def track(self, session: TitoSession, work: asyncio.Future[Any]) -> OpenRequest:
        """``session`` waits on the engine through ``work``; the liveness watch runs while anyone does."""
        entry = session.request_started(work)
        if (self._watch is None or self._watch.done()) and not self.stopping:
            backend = self.backend
            self._watch = asyncio.ensure_future(
                backend.liveness.watch(lambda: backend.engine, self.oldest_open_request, backend.probe_prompt())
            )
        return entry

    def oldest_open_request(self) -> float | None:
        starts = [e.started for s in self.sessions.values() for e in s.inflight.values()]
        return min(starts) if starts else None

    async def stop_watch(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None and not watch.done():
            watch.cancel()
            await asyncio.wait({watch})  # a probe in flight is let go at once; the watch itself never raises

    async def shut(self, why: str) -> None:
        """The gateway is stopping: cut off every open engine request (not the end of anyone's turn) and stop
        the watch; :attr:`stopping` stays set until the gateway starts again."""
        self.stopping = True
        for s in self.sessions.values():
            s.cancel_open_requests(why, turn_ended=False)
        await self.stop_watch()
