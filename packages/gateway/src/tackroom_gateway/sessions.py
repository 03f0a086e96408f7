"""The gateway's sessions: one :class:`~tackroom_gateway.tito.TitoSession` per agent conversation, reached at
``/sessions/{sid}/{token}/v1``. The programmatic API the trial runtime uses (open, address, read, settle, close)
and the routes that create, list, read and close sessions (admin, or a session's own token)."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tackroom import Policy, TackroomError, Trajectory
from tackroom_gateway.errors import BadRequestError, GatewayError, SessionNotFoundError
from tackroom_gateway.tito import SessionSummary, TitoSession

SESSION_ID = re.compile(r"(?!\.+$)[A-Za-z0-9_.-]{1,512}")
"""What a session id may be: it is a URL path segment (so not ``.`` or ``..``)."""


class SessionRoutes:
    """The sessions half of :class:`~tackroom_gateway.server.PolicyGateway` (its ``sessions``, ``template``,
    ``liveness``, ``engine`` and access checks live there)."""

    def open_session(self, session_id: str | None = None) -> TitoSession:
        """The session with this id, created (with a fresh token) if there is none; a random id when None."""
        sid = session_id if session_id is not None else uuid.uuid4().hex
        if not SESSION_ID.fullmatch(sid):
            raise BadRequestError(
                f"session id {sid[:80]!r} is not 1-512 characters of letters, digits, '_', '.' and '-' (nor only dots)"
            )
        s = self.sessions.get(sid)
        if s is None:
            if self.template is None:
                raise GatewayError("gateway not prepared: await gateway.start() before opening sessions")
            s = self.sessions[sid] = TitoSession(sid, self.template, engine_failure=self.liveness.failure)
        return s

    def session_base_url(self, session_id: str) -> str:
        """The OpenAI base URL (``.../sessions/{id}/{token}/v1``) a harness uses; opens the session if needed."""
        base = self.base_url
        s = self.open_session(session_id)
        return f"{base}/sessions/{s.session_id}/{s.token}/v1"

    def policy(self, session_id: str, **overrides: Any) -> Policy:
        """A :class:`tackroom.Policy` pointing at this session (opened if needed)."""
        return Policy(
            base_url=self.session_base_url(session_id),
            model=self.model_name,
            tokenizer=self.template.name_or_path if self.template else self.settings.tokenizer,
            **overrides,
        )

    def trial_sessions(self, *, sampling: dict[str, Any] | None = None, label: str | None = None) -> Any:
        """``TrialPlugins.policy_for``: a fresh session of this gateway per trial attempt
        (:class:`~tackroom_gateway.trial_sessions.GatewaySessions`; what ``tackroom_policy_gateway`` promises)."""
        from tackroom_gateway.trial_sessions import GatewaySessions

        return GatewaySessions(self, sampling=sampling, label=label)

    def session(self, session_id: str) -> TitoSession:
        try:
            return self.sessions[session_id]
        except KeyError:
            raise SessionNotFoundError(
                f"no session {session_id!r}; sessions so far: {', '.join(sorted(self.sessions)) or 'none'}"
            ) from None

    def trajectory(self, session_id: str, branch: int | None = None) -> Trajectory:
        """The session's turns and the flattened tokens of ``branch`` (default: the newest turn's branch)."""
        return self.session(session_id).trajectory(branch)

    def session_error(self, session_id: str) -> TackroomError | None:
        """The classified error that should decide the trial (see ``TitoSession.worst_error``), or None.

        An engine request still open when this is asked (the agent's turn ended while
        the engine was working) is an infra error if the engine is not answering its
        liveness probes, and nothing (the model's own long generation) if it is.
        """
        s = self.sessions.get(session_id)
        return s.worst_error() if s else None

    async def settle_session(self, session_id: str) -> None:
        """Before :meth:`session_error` is asked at the end of a turn: when an engine request of the session was
        open at the end (still open, or cut off then) and nothing has shown since it was sent whether the engine
        answers (no probe, no output), send one last probe and wait for it (``probe_timeout_s`` at most).

        Without it a turn shorter than ``probe_interval_s`` that ends waiting on a silent engine would leave no
        verdict, and the agent's timeout would count as the model's failure; with it, a silent engine is
        ``infra`` at any agent timeout."""
        s = self.sessions.get(session_id)
        if s is None or self.engine is None or self.template is None:
            return
        since = s.unsettled_since()
        if since is None:
            return
        p, answered = self.liveness.last_probe, self.liveness.last_answer_at
        if (p is not None and p.sent_at >= since) or (answered is not None and answered >= since):
            return  # a probe sent, or output produced, after the request went out: the verdict exists
        eot = self.template.end_of_turn_id
        await self.liveness.probe(self.engine, [eot if eot is not None else 0])

    def close_session(self, session_id: str) -> Trajectory | None:
        """Forget a session (its URL stops working, its open engine requests are cut off); returns its
        trajectory (None if it never finished a turn)."""
        s = self.sessions.pop(session_id, None)
        if s is None:
            return None
        s.cancel_open_requests("the session was closed")
        return s.trajectory() if s.turns else None

    # -- routes ------------------------------------------------------------------------
    def _session_urls(self, request: Request, s: TitoSession) -> dict[str, str]:
        base = f"{str(request.base_url).rstrip('/')}/sessions/{s.session_id}/{s.token}"
        return {"session_id": s.session_id, "base_url": f"{base}/v1", "trajectory_url": f"{base}/trajectory"}

    async def _create_session(self, request: Request) -> Response:
        self._check_admin(request)
        raw = await request.body()
        data: Any = {}
        if raw.strip():
            try:
                data = json.loads(raw)
            except ValueError as exc:
                raise BadRequestError(f'body must be empty or JSON like {{"session_id": "..."}}: {exc}') from exc
        if not isinstance(data, dict) or not isinstance(data.get("session_id", ""), str):
            raise BadRequestError('body must be empty or a JSON object like {"session_id": "..."}')
        sid = data.get("session_id") or None
        existed = sid in self.sessions
        s = self.open_session(sid)
        return JSONResponse(self._session_urls(request, s), status_code=200 if existed else 201)

    async def _list_sessions(self, request: Request) -> Response:
        self._check_admin(request)
        rows = [
            SessionSummary(session_id=sid, turns=len(s.turns), branches=len(s.tips), open_requests=len(s.inflight),
                           errors=[str(e) for e in s.errors]).model_dump()
            for sid, s in self.sessions.items()
        ]
        return JSONResponse(rows)

    def _trajectory_response(self, s: TitoSession, request: Request) -> Response:
        branch = request.query_params.get("branch")
        try:
            traj = s.trajectory(int(branch) if branch is not None else None)
        except (KeyError, ValueError) as exc:
            raise BadRequestError(f"no branch {branch!r} in this session ({type(exc).__name__}: {exc})") from exc
        return Response(traj.model_dump_json(), media_type="application/json")

    async def _trajectory_admin(self, request: Request) -> Response:
        self._check_admin(request)
        return self._trajectory_response(self.session(request.path_params["sid"]), request)

    async def _trajectory_own(self, request: Request) -> Response:
        return self._trajectory_response(self._session_at(request), request)

    async def _close(self, request: Request) -> Response:
        self._check_admin(request)
        sid = request.path_params["sid"]
        self.session(sid)  # 404 when there is none
        traj = self.close_session(sid)
        return Response(traj.model_dump_json() if traj else "null", media_type="application/json")
