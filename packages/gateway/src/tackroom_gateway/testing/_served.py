"""The test servers of ``tackroom_gateway.testing``: an ASGI app served in this event loop as an OpenAI base URL."""

from __future__ import annotations

from typing import Any

from tackroom.testing import ServedForTests
from tackroom_gateway.asgi_server import InLoopServer


class AsgiServedForTests(ServedForTests):
    """Serves the ASGI ``app`` with uvicorn in this event loop (lifecycle, ``base_url`` and ``policy()``:
    :class:`tackroom.testing.ServedForTests`)."""

    def _serve(self, app: Any, *, model: str, what: str, graceful_timeout_s: float) -> None:
        self.app = app
        self._setup(model=model, what=what, graceful_timeout_s=graceful_timeout_s)
        self._server = InLoopServer(app, what=what, graceful_timeout_s=graceful_timeout_s, error=RuntimeError)

    async def _listen(self) -> int:
        return await self._server.start()

    async def _shutdown(self) -> None:
        await self._server.stop()
