"""The test servers of ``tackroom_gateway.testing``: an ASGI app served in this event loop as an OpenAI base URL."""

from __future__ import annotations

import asyncio
from typing import Any, Self

from tackroom import Policy
from tackroom_gateway.asgi_server import InLoopServer


class ServedForTests:
    """Serves ``app`` on 127.0.0.1 (``async with`` or ``await start()``); ``base_url`` ends in ``/v1``.

    ``_closing`` is set when the server stops, so replies a test holds open end instead of holding
    the shutdown.
    """

    def _serve(self, app: Any, *, model: str, what: str, graceful_timeout_s: float) -> None:
        self.app = app
        self.model = model
        self.what = what
        self.port: int | None = None
        self._closing = asyncio.Event()
        self._server = InLoopServer(app, what=what, graceful_timeout_s=graceful_timeout_s, error=RuntimeError)

    async def start(self) -> Self:
        self._closing = asyncio.Event()
        self.port = await self._server.start()
        return self

    async def stop(self) -> None:
        self._closing.set()
        await self._server.stop()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        """The server's OpenAI base URL, ending in ``/v1``."""
        if self.port is None:
            raise RuntimeError(f"{self.what} not started: use `async with` or await start()")
        return f"http://127.0.0.1:{self.port}/v1"

    def policy(self, **overrides: Any) -> Policy:
        """A :class:`~tackroom.Policy` pointing straight at this server."""
        return Policy(base_url=self.base_url, model=self.model, **overrides)
