"""An ASGI app served by uvicorn inside the running event loop, on loopback.

The policy gateway, the misbehaving engine of ``tackroom_gateway.testing``, plugins'
relays and the Tinker backend's sampling endpoint all need the same thing: serve
an app in *this* loop (no thread, no process), know the port once ``start()``
returns (port 0 picks a free one), fail fast with the server's own exception
when it cannot bind, and stop without hanging on open connections. A multi-worker gateway's workers also
``adopt`` connections their front accepted and handed over (:mod:`tackroom_gateway.workers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

import uvicorn

from tackroom import InfraError


def _not_a_cancelled_request(record: logging.LogRecord) -> bool:
    """False for uvicorn's "Exception in ASGI application" when the exception is a cancellation.

    On Ctrl-C (or SIGTERM) the run is cancelled, and with it every request still being served: a gateway
    mid-completion, a relay mid-tool-call. uvicorn logs each one as an error with a full traceback (a
    training run printed 23 of them on one Ctrl-C), burying the one line that says it was interrupted.
    """
    exc = record.exc_info[1] if record.exc_info else None
    return not (isinstance(exc, asyncio.CancelledError) and str(record.msg).startswith("Exception in ASGI application"))


logging.getLogger("uvicorn.error").addFilter(_not_a_cancelled_request)

T = TypeVar("T")


def run_event_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run a server process's ``main`` on uvloop where it is installed (a gateway sits on every model call), else
    on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


class _QuietServer(uvicorn.Server):
    """uvicorn's server without its signal handling: the application owns SIGINT/SIGTERM.

    ``uvicorn.Server.serve`` swaps in its own SIGINT/SIGTERM handlers for as long as it serves and
    re-raises the signal when it stops. With servers inside a run (a gateway per model, relays), a
    Ctrl-C then stopped only the servers, and the run went on scoring every later trial as an infra
    error. Here Ctrl-C reaches the application (asyncio cancels the run), which stops its servers.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class InLoopServer:
    """``await server.start()`` → the bound port; ``await server.stop()``.

    ``error`` is the exception type raised when it does not start (the caller's
    own, e.g. ``GatewayError``); ``what`` names the server in that message.
    ``graceful_timeout_s`` bounds how long ``stop()`` lets open requests finish
    (``None``: until ``stop_timeout_s``, then the serving task is cancelled).
    """

    def __init__(self, app: Any, *, what: str, host: str = "127.0.0.1", port: int = 0,
                 startup_timeout_s: float = 30.0, stop_timeout_s: float = 10.0,
                 graceful_timeout_s: float | None = None, error: type[Exception] = InfraError) -> None:
        self.app, self.what, self.host, self.requested_port = app, what, host, port
        self.startup_timeout_s, self.stop_timeout_s = startup_timeout_s, stop_timeout_s
        self.graceful_timeout_s, self.error = graceful_timeout_s, error
        self.port: int | None = None
        self._server: _QuietServer | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> int:
        config = uvicorn.Config(self.app, host=self.host, port=self.requested_port, log_level="warning",
                                lifespan="off", access_log=False, timeout_graceful_shutdown=self.graceful_timeout_s)
        self._server = _QuietServer(config)
        self._task = asyncio.create_task(self._serve(self._server), name=self.what)
        deadline = time.monotonic() + self.startup_timeout_s
        while not self._server.started:
            if self._task.done():
                exc = self._task.exception() if not self._task.cancelled() else "cancelled"
                self._task = None
                raise self.error(f"{self.what} failed to start on {self.host}:{self.requested_port}: {exc}")
            if time.monotonic() > deadline:
                self._task.cancel()
                raise self.error(f"{self.what} did not start within {self.startup_timeout_s:.0f}s")
            await asyncio.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self.port

    @staticmethod
    async def _serve(server: uvicorn.Server) -> None:
        # uvicorn calls sys.exit() when it cannot bind; a SystemExit inside a task escapes the event loop
        try:
            await server.serve()
        except SystemExit:
            raise OSError("could not bind (address in use?); uvicorn logged the details") from None

    async def adopt(self, sock: socket.socket) -> None:
        """Serve a connection accepted elsewhere (a socket another process handed over) as if this server had
        accepted it: same app, protocol and settings; ``stop()`` closes it with the others. ``start()`` first."""
        server = self._server
        if server is None or not server.started:
            sock.close()
            raise self.error(f"{self.what} is not serving: cannot take a connection")
        config, loop = server.config, asyncio.get_running_loop()

        def protocol() -> asyncio.Protocol:  # what uvicorn.Server.startup builds for each connection it accepts
            return config.http_protocol_class(config=config, server_state=server.server_state,
                                              app_state=server.lifespan.state, _loop=loop)

        await loop.connect_accepted_socket(protocol, sock)

    async def wait(self) -> None:
        """Return when the server stops serving on its own (uvicorn exited or crashed); raise its error."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def stop(self, *, force: bool = False) -> None:
        """Ask uvicorn to exit (``force``: without waiting for open connections); cancel it after ``stop_timeout_s``.

        A stop while the caller is being cancelled (Ctrl-C, SIGTERM, a run's timeout) is forced: the requests
        still open belong to the work being cancelled, and waiting ``stop_timeout_s`` on them only delays the exit.
        Requests still being handled when the server has stopped are cancelled and awaited, so none of them runs
        on against what its caller closes next (an HTTP client, an engine).
        """
        current = asyncio.current_task()
        forced = force or (current is not None and current.cancelling() > 0)
        if self._server is not None:
            self._server.should_exit = True
            if forced:  # a cancelled request answers 500 and closes its connection, which uvicorn's exit waits for
                self._server.force_exit = True
                self._cancel_requests()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), self.stop_timeout_s)
            except (TimeoutError, asyncio.CancelledError):
                self._task.cancel()
            self._task = None
        if handling := self._cancel_requests():
            await asyncio.wait(handling, timeout=self.stop_timeout_s)

    def _cancel_requests(self) -> list[asyncio.Task[Any]]:
        """Cancel the requests uvicorn is still handling; the tasks, to await."""
        handling = list(self._server.server_state.tasks) if self._server is not None else []
        for request in handling:
            request.cancel()
        return handling
