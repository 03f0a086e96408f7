"""Which worker of a multi-worker gateway serves a request (``tackroom gateway --workers N``).

A session's state (its token history, its :class:`~tackroom_gateway.tito.TitoSession`) lives in one worker
process, its *owner*: a stable hash of the session id, so the front and every worker agree without sharing a
registry. A request whose path names a session (``/sessions/{sid}/...``) belongs to that session's owner; the
dialect routes outside a session serve the admin's session ``default``, so they belong to its owner; the rest
(``/health``, ``/v1/models``, ``/sessions``, ``/weights...``) any worker may answer, fanning out where the
answer is about every worker. Pure functions: the front applies them to the request line it peeked, a worker
to the path uvicorn parsed (the worker's answer is the one that counts: a path the two read differently, say
percent-encoded, is forwarded once more, never served in the wrong place).
"""

from __future__ import annotations

import zlib

DEFAULT_SESSION = "default"
"""The session the admin's routes outside a session (``POST /v1/chat/completions`` ...) serve."""

SHARED_PATHS = frozenset({"/health", "/v1/models", "/sessions", "/weights", "/weights/pause", "/weights/resume"})
"""Paths that name no session: any worker answers (``/sessions`` and ``/weights...`` by asking every worker)."""

MAX_REQUEST_LINE = 8192
"""The longest request line the front reads to pick a worker; a longer one is refused (connection closed)."""


def owner(session_id: str, workers: int) -> int:
    """The index of the worker that holds ``session_id`` among ``workers``."""
    return zlib.crc32(session_id.encode()) % workers


def session_of(path: str) -> str | None:
    """The session whose state a request to ``path`` reads or changes, or None when any worker may answer."""
    if path.startswith("/sessions/"):
        return path[len("/sessions/"):].split("/", 1)[0] or None
    if path in SHARED_PATHS:
        return None
    return DEFAULT_SESSION


def request_path(request_line: bytes) -> str | None:
    """The path of an HTTP/1 request line (``POST /sessions/a/t/v1/chat/completions HTTP/1.1``), without its
    query; None when the line is not one (uvicorn answers it, wherever it lands)."""
    parts = request_line.strip().split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
        return None
    target = parts[1].decode("latin-1")
    if target.startswith(("http://", "https://")):  # absolute form: the path is after the authority
        target = "/" + target.split("/", 3)[3] if target.count("/") >= 3 else "/"
    if not target.startswith("/"):
        return None
    return target.split("?", 1)[0].split("#", 1)[0]
