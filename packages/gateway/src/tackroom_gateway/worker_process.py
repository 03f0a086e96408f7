"""One worker process of a multi-worker gateway: ``python -m tackroom_gateway.worker_process CHANNEL_FD``.

Started by the front (:mod:`tackroom_gateway.workers`), never by hand. It reads its
:class:`~tackroom_gateway.worker_channel.WorkerSpec` from the channel, builds the same gateway a single process
would (its own engine client, tokenizer, chat template and sessions), serves it on a private loopback port behind
a :class:`~tackroom_gateway.forwarding.WorkerRouter`, says :class:`Ready` (or :class:`Failed`), then serves the
connections the front hands over. It stops on SIGTERM or when the channel closes (the front is gone); SIGINT is
left to the front, which stops the workers in order (a Ctrl-C reaches the whole process group).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys

from tackroom import TackroomError
from tackroom_gateway.asgi_server import InLoopServer, run_event_loop
from tackroom_gateway.errors import GatewayError
from tackroom_gateway.forwarding import Siblings, WorkerRouter
from tackroom_gateway.server import PolicyGateway
from tackroom_gateway.worker_channel import Failed, Lost, Peers, Ready, WorkerChannel, WorkerSpec

log = logging.getLogger("tackroom_gateway")


class GatewayWorker:
    """The gateway of one worker, its router and the connections handed to it."""

    def __init__(self, spec: WorkerSpec, channel: WorkerChannel) -> None:
        self.spec, self.channel = spec, channel
        self.gateway = PolicyGateway(spec.gateway, admin_token=spec.admin_token)
        self.siblings = Siblings(spec.index, spec.workers)
        self.router = WorkerRouter(self.gateway.app, self.siblings)
        self.server = InLoopServer(self.router, what=f"gateway worker {spec.index}", host="127.0.0.1", port=0,
                                   startup_timeout_s=spec.gateway.startup_timeout_s, error=GatewayError)
        self.stop = asyncio.Event()
        self._adopting: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self.gateway.prepare()
        self.router.private_port = await self.server.start()

    def on_channel(self) -> None:
        """The channel is readable: handed-over connections to serve, what the front tells, or its end."""
        got = self.channel.drain()
        for item in got or []:
            if isinstance(item, socket.socket):
                self._adopt(item)
            elif isinstance(item, Peers):
                self.siblings.ports, self.siblings.pids = item.ports, item.pids
            elif isinstance(item, Lost):
                self.siblings.lost[item.worker] = item.why
        if got is None:
            self.stop.set()

    def _adopt(self, conn: socket.socket) -> None:
        if self.stop.is_set():
            conn.close()
            return
        task = asyncio.ensure_future(self.server.adopt(conn))
        self._adopting.add(task)
        task.add_done_callback(self._adopted)

    def _adopted(self, task: asyncio.Task[None]) -> None:
        self._adopting.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.debug("gateway worker %d: a handed-over connection could not be served: %s", self.spec.index,
                      task.exception())

    async def aclose(self) -> None:
        """Stop as a single gateway stops: open engine requests cut off (their clients get a 503), then the server."""
        for task in list(self._adopting):
            task.cancel()
        await self.gateway.store.shut("the gateway stopped")
        await self.server.stop()
        await self.gateway.stop()
        await self.router.aclose()


async def serve(channel_fd: int) -> int:
    """Serve as the front's worker until told to stop; the exit status."""
    loop = asyncio.get_running_loop()
    channel = WorkerChannel(socket.socket(fileno=channel_fd))
    spec = await channel.receive()
    if not isinstance(spec, WorkerSpec):
        return 2  # the front went away before saying anything
    worker = GatewayWorker(spec, channel)
    loop.add_signal_handler(signal.SIGTERM, worker.stop.set)
    loop.add_reader(channel.fileno(), worker.on_channel)
    try:
        starting = asyncio.ensure_future(worker.start())
        stopped = asyncio.ensure_future(worker.stop.wait())
        await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():  # told to stop (or the front is gone) while loading
            starting.cancel()
            await asyncio.wait({starting})
            return 0
        stopped.cancel()
        if (exc := starting.exception()) is not None:
            why = str(exc) if isinstance(exc, TackroomError) else f"{type(exc).__name__}: {exc}"
            with contextlib.suppress(OSError):
                await channel.send(Failed(error=why))
            return 2
        await channel.send(Ready(port=worker.router.private_port, model=worker.gateway.model_name, pid=os.getpid()))
        died = asyncio.ensure_future(worker.server.wait())
        stopped = asyncio.ensure_future(worker.stop.wait())
        done, _ = await asyncio.wait({died, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if died in done:
            log.error("gateway worker %d stopped serving: %s", spec.index, died.exception())
            return 1
        died.cancel()
        return 0
    finally:
        loop.remove_reader(channel.fileno())
        await worker.aclose()
        channel.close()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(run_event_loop(serve(int(sys.argv[1]))))


if __name__ == "__main__":
    main()
