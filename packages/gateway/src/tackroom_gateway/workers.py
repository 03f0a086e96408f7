"""``tackroom gateway --workers N``: one gateway address served by N worker processes, each session in one of them.

A gateway costs a millisecond or two of CPU per request in one asyncio process, so one process tops out at one
core. :class:`GatewayWorkers` (the *front*, the parent process) owns the public socket and starts N workers
(:mod:`tackroom_gateway.worker_process`), each building the same gateway a single process would. For each
connection it accepts, the front peeks at the first request line (``MSG_PEEK``: at most
:data:`~tackroom_gateway.pinning.MAX_REQUEST_LINE` bytes within ``peek_timeout_s``, else the connection is closed,
so a client that sends nothing holds nothing), picks the worker (the owner of the session the path names, any
other request in turn) and hands the connected socket to it over a Unix socketpair (``SCM_RIGHTS``); from then on
the worker's uvicorn serves the connection, the front never reads a byte of it. Later requests on a kept-alive
connection that belong to another worker are forwarded there by the worker (:mod:`tackroom_gateway.forwarding`),
and so are the admin routes that are about every worker.

A worker that exits is logged by index and pid and gets no more connections; its sessions answer 503
``gateway_worker_lost`` and ``/health`` says ``degraded``. Stopping the front stops the workers (SIGTERM, then
SIGKILL after ``stop_timeout_s``), and a worker whose front is gone (its channel closed) stops on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import signal
import socket
import sys
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from tackroom import ConfigError
from tackroom_gateway.backend import GatewaySettings
from tackroom_gateway.errors import GatewayError
from tackroom_gateway.pinning import MAX_REQUEST_LINE, owner, request_path, session_of
from tackroom_gateway.worker_channel import Failed, Lost, Peers, Ready, WorkerChannel, WorkerSpec, wait_for_io

log = logging.getLogger("tackroom_gateway")


class WorkersSettings(BaseModel):
    """How the front serves one gateway from several processes (the gateway itself: :class:`GatewaySettings`,
    whose ``host`` and ``port`` are the public address)."""

    workers: int = Field(2, ge=2)
    """Worker processes; sessions are spread over them by a hash of their id."""
    peek_timeout_s: float = 5.0
    """How long a new connection has to send its first request line before the front closes it."""
    start_timeout_s: float = 600.0
    """How long every worker has to load its tokenizer and reach the engine."""
    stop_timeout_s: float = 20.0
    """How long workers have to stop after SIGTERM before they are killed."""


@dataclass(eq=False)
class _Worker:
    index: int
    channel: WorkerChannel
    process: asyncio.subprocess.Process
    ready: Ready | None = None
    returncode: int | None = None
    lost: bool = False
    """Exited while the gateway served (not stopped by the front)."""
    handed_off: int = 0
    watch: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def alive(self) -> bool:
        return self.returncode is None

    def name(self) -> str:
        return f"gateway worker {self.index} (pid {self.process.pid})"


def _exit_reason(returncode: int) -> str:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-returncode).name}"
    return f"exited with code {returncode}"


async def peek_request_line(conn: socket.socket, timeout_s: float, limit: int = MAX_REQUEST_LINE) -> bytes | None:
    """The connection's first request line, read with ``MSG_PEEK`` (left in the socket for whoever serves it);
    None when the client closes, sends more than ``limit`` bytes without a line end, or takes longer than
    ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        try:
            data = conn.recv(limit, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            data = None
        except OSError:
            return None
        if data == b"":
            return None
        if data:
            end = data.find(b"\n")
            if end >= 0:
                return data[:end]
            if len(data) >= limit:
                return None
        left = deadline - loop.time()
        if left <= 0:
            return None
        if data is None:
            await wait_for_io(conn, timeout=left)
        else:  # part of a line: the socket stays readable, so look again shortly rather than spin
            await asyncio.sleep(min(0.005, left))


class GatewayWorkers:
    """The front of a multi-worker gateway (see the module docstring): ``await start()``, ``base_url``,
    ``admin_token`` (shared by every worker), ``await serve_until(stop)`` or ``await stop()``."""

    def __init__(self, gateway: GatewaySettings, settings: WorkersSettings, *, admin_token: str | None = None) -> None:
        self.gateway, self.settings = gateway, settings
        self.admin_token = admin_token or secrets.token_urlsafe(32)
        self.port: int | None = None
        self._workers: list[_Worker] = []
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._routing: set[asyncio.Task[None]] = set()
        self._turn = 0
        self._stopping = False
        self._all_lost = asyncio.Event()

    # -- what callers read ----------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return self.gateway.public_url(self.port)

    @property
    def model_name(self) -> str:
        return next((w.ready.model for w in self._workers if w.ready is not None), self.gateway.model_name or "")

    @property
    def pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]

    @property
    def handed_off(self) -> list[int]:
        """Connections handed to each worker so far."""
        return [w.handed_off for w in self._workers]

    @property
    def lost(self) -> dict[int, int]:
        """The workers that exited while serving, with their exit status."""
        return {w.index: w.returncode for w in self._workers if w.lost and w.returncode is not None}

    # -- lifecycle ------------------------------------------------------------------------------------------
    async def start(self) -> GatewayWorkers:
        """Bind the public address, start the workers and wait until every one serves; then accept."""
        if not (hasattr(socket, "send_fds") and hasattr(socket, "SOCK_SEQPACKET") and sys.platform == "linux"):
            raise ConfigError("`tackroom gateway --workers N` hands connections between processes with Unix "
                              "SCM_RIGHTS over SOCK_SEQPACKET, which needs Linux; run one worker (--workers 1) here")
        try:
            self._listener = socket.create_server((self.gateway.host, self.gateway.port), backlog=2048)
        except OSError as exc:
            raise GatewayError(f"gateway failed to start on {self.gateway.host}:{self.gateway.port}: {exc}") from exc
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        try:
            for index in range(self.settings.workers):
                self._workers.append(await self._spawn(index))
            await self._wait_ready()
            peers = Peers(ports=[w.ready.port for w in self._workers], pids=self.pids)  # type: ignore[union-attr]
            for w in self._workers:
                await w.channel.send(peers)
                w.watch = asyncio.ensure_future(self._watch(w))
        except BaseException:
            await self.stop()
            raise
        self._accepting = asyncio.ensure_future(self._accept())
        return self

    async def _spawn(self, index: int) -> _Worker:
        channel, theirs = WorkerChannel.pair()
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "tackroom_gateway.worker_process", str(theirs.fileno()),
                pass_fds=(theirs.fileno(),), stdin=asyncio.subprocess.DEVNULL)
        finally:
            theirs.close()
        worker = _Worker(index, channel, process)
        private = self.gateway.model_copy(update={"host": "127.0.0.1", "port": 0})
        await channel.send(WorkerSpec(index=index, workers=self.settings.workers, gateway=private,
                                      admin_token=self.admin_token))
        return worker

    async def _wait_ready(self) -> None:
        async def ready(w: _Worker) -> None:
            said = await w.channel.receive()
            if isinstance(said, Failed):
                raise GatewayError(f"{w.name()} could not start: {said.error}")
            if not isinstance(said, Ready):
                code = await w.process.wait()
                raise GatewayError(f"{w.name()} {_exit_reason(code)} while starting (its output is above)")
            w.ready = said

        waiting = [asyncio.ensure_future(ready(w)) for w in self._workers]
        try:
            done, pending = await asyncio.wait(waiting, timeout=self.settings.start_timeout_s,
                                               return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()  # the first worker that could not start says why
            if pending:
                late = ", ".join(w.name() for w, t in zip(self._workers, waiting) if t in pending)
                raise GatewayError(f"{late} did not start within {self.settings.start_timeout_s:.0f}s")
        finally:
            for task in waiting:
                task.cancel()

    async def serve_until(self, stop: asyncio.Event) -> None:
        """Serve (``start()`` first) until ``stop`` is set or every worker has exited, then stop them all."""
        stopped = asyncio.ensure_future(stop.wait())
        all_lost = asyncio.ensure_future(self._all_lost.wait())
        try:
            done, _ = await asyncio.wait({stopped, all_lost}, return_when=asyncio.FIRST_COMPLETED)
            if all_lost in done:
                raise GatewayError("every gateway worker exited (see the log above): the gateway stopped serving")
        finally:
            stopped.cancel()
            all_lost.cancel()
            await self.stop()

    async def stop(self) -> None:
        """Stop accepting, then stop the workers: SIGTERM (each cuts off its open engine requests and closes its
        connections, as a single gateway does), SIGKILL for any still running after ``stop_timeout_s``."""
        self._stopping = True
        if self._accepting is not None:
            self._accepting.cancel()
            await asyncio.wait({self._accepting})
            self._accepting = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for task in list(self._routing):
            task.cancel()
        if self._routing:
            await asyncio.wait(self._routing)
        running = [w for w in self._workers if w.process.returncode is None]
        for w in running:
            with contextlib.suppress(ProcessLookupError):
                w.process.send_signal(signal.SIGTERM)
        exits = [asyncio.ensure_future(w.process.wait()) for w in running]
        if exits:
            _, late = await asyncio.wait(exits, timeout=self.settings.stop_timeout_s)
            if late:
                for w in running:
                    if w.process.returncode is None:
                        log.warning("%s did not stop within %.0fs of SIGTERM: killed", w.name(),
                                    self.settings.stop_timeout_s)
                        with contextlib.suppress(ProcessLookupError):
                            w.process.kill()
                await asyncio.wait(exits)
        for w in self._workers:
            if w.watch is not None:
                w.watch.cancel()
            w.channel.close()

    async def __aenter__(self) -> GatewayWorkers:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- the workers --------------------------------------------------------------------------------------
    async def _watch(self, w: _Worker) -> None:
        w.returncode = await w.process.wait()
        if self._stopping:
            return
        w.lost = True
        why = _exit_reason(w.returncode)
        log.error("%s %s: the sessions it held are lost (their requests answer 503 gateway_worker_lost); it gets "
                  "no more connections", w.name(), why)
        for other in self._workers:
            if other.alive:
                with contextlib.suppress(OSError):
                    await other.channel.send(Lost(worker=w.index, why=why))
        if not any(other.alive for other in self._workers):
            self._all_lost.set()

    # -- connections ----------------------------------------------------------------------------------------
    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._listener is not None
        while True:
            try:
                conn, _ = await loop.sock_accept(self._listener)
            except OSError as exc:  # out of file descriptors, say: let some close
                log.warning("gateway front: accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            conn.setblocking(False)
            task = asyncio.ensure_future(self._route(conn))
            self._routing.add(task)
            task.add_done_callback(self._routing.discard)

    async def _route(self, conn: socket.socket) -> None:
        """Peek at the first request line, hand the connection to its worker, close the front's copy."""
        try:
            line = await peek_request_line(conn, self.settings.peek_timeout_s)
            worker = self._pick(line) if line is not None else None
            if worker is not None:
                await worker.channel.hand_over(conn)
                worker.handed_off += 1
        except OSError as exc:  # the worker's end is gone: the client sees its connection closed
            log.debug("gateway front: could not hand a connection over: %s", exc)
        finally:
            conn.close()

    def _pick(self, line: bytes) -> _Worker | None:
        """The owner of the session the request names, when it serves; else the next serving worker in turn."""
        path = request_path(line)
        sid = session_of(path) if path is not None else None
        if sid is not None:
            w = self._workers[owner(sid, len(self._workers))]
            if w.alive:
                return w
        serving = [w for w in self._workers if w.alive]
        if not serving:
            return None
        self._turn += 1
        return serving[self._turn % len(serving)]
