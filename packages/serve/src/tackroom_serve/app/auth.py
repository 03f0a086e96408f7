"""Who may call the service: a bearer token per client, as the gateway's admin routes take one.

Tokens come from a file (``--tokens``: one client a line, ``NAME TOKEN``, ``#`` comments) or one is generated at
start and printed (client ``default``). A request without a valid ``Authorization: Bearer <token>`` is answered 401
before anything is read or written; the client's name (never its token) is recorded on what it creates.
"""

from __future__ import annotations

import hmac
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from tackroom import ConfigError

MIN_TOKEN_CHARS = 16
NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,128}$")


@dataclass(frozen=True)
class Tokens:
    """Client name by token."""

    clients: dict[str, str]

    @classmethod
    def generated(cls, name: str = "default") -> tuple[Tokens, str]:
        token = secrets.token_urlsafe(32)
        return cls({token: name}), token

    @classmethod
    def from_file(cls, path: Path) -> Tokens:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ConfigError(f"--tokens {path}: {exc.strerror or exc}") from None
        clients: dict[str, str] = {}
        for number, line in enumerate(lines, 1):
            parts = line.split("#", 1)[0].split()
            if not parts:
                continue
            if len(parts) != 2 or not NAME.match(parts[0]) or len(parts[1]) < MIN_TOKEN_CHARS:
                raise ConfigError(f"--tokens {path}, line {number}: write `NAME TOKEN` (a name of letters, digits "
                                  f"and ._@-; a token of at least {MIN_TOKEN_CHARS} characters)")
            if parts[1] in clients:
                raise ConfigError(f"--tokens {path}, line {number}: this token is already given to "
                                  f"{clients[parts[1]]!r}")
            clients[parts[1]] = parts[0]
        if not clients:
            raise ConfigError(f"--tokens {path}: no `NAME TOKEN` line")
        return cls(clients)

    def client(self, authorization: str | None) -> str | None:
        """The client an ``Authorization`` header names, or None."""
        scheme, _, credentials = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            return None
        given = credentials.strip().encode()
        found = None
        for token, name in self.clients.items():  # compare with every token: the time says nothing
            if hmac.compare_digest(given, token.encode()):
                found = name
        return found
