"""Who may use a gateway route: the admin token for the admin routes, a session's own token for its URL."""

from __future__ import annotations

import hmac

from starlette.requests import Request

from tackroom_gateway.errors import AdminAuthError, SessionNotFoundError
from tackroom_gateway.tito import TitoSession


def check_admin(request: Request, admin_token: str) -> None:
    """Raise :class:`AdminAuthError` unless ``request`` carries ``Authorization: Bearer <admin_token>``."""
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(credentials.strip().encode(), admin_token.encode()):
        raise AdminAuthError(
            "this route needs the gateway's admin token (`Authorization: Bearer <token>`; "
            "`tackroom gateway` prints it); a session's own URL is /sessions/{id}/{token}/v1"
        )


def session_at(request: Request, sessions: dict[str, TitoSession]) -> TitoSession:
    """The session a ``/sessions/{sid}/{token}/...`` URL names, if the token is its own."""
    s = sessions.get(request.path_params["sid"])
    token = request.path_params["token"].encode()
    if s is None or not hmac.compare_digest(token, s.token.encode()):
        raise SessionNotFoundError(
            "no session at this URL: the session was closed or the URL is wrong "
            "(a session's base URL is /sessions/{id}/{token}/v1, as its creator was given it)"
        )
    return s
