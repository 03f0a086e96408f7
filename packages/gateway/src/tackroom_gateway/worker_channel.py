"""The channel between the front of a multi-worker gateway and one of its workers: a Unix socketpair.

Messages are small JSON objects, one per packet (``SOCK_SEQPACKET`` keeps their bounds), and an accepted client
connection travels as its file descriptor (``SCM_RIGHTS``): the front hands the socket over and closes its copy,
the worker serves it. The front sends :class:`WorkerSpec` first (the gateway to build, the shared admin token:
never on a command line), then :class:`Peers` once every worker is up, :class:`Lost` when a worker exits, and
connections; a worker answers :class:`Ready` or :class:`Failed`. The channel closing is the other side's end: a
worker whose front went away (killed, crashed) stops, so none outlives it.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Annotated, Literal

from pydantic import BaseModel, Field, TypeAdapter

from tackroom_gateway.backend import GatewaySettings


class WorkerSpec(BaseModel):
    """What a worker builds: the gateway (served on a private loopback port), its place among the workers and
    the admin token they all share."""

    kind: Literal["spec"] = "spec"
    index: int
    workers: int
    gateway: GatewaySettings
    admin_token: str


class Peers(BaseModel):
    """Every worker's private port and pid, by index: where a worker forwards a request it does not own."""

    kind: Literal["peers"] = "peers"
    ports: list[int]
    pids: list[int]


class Lost(BaseModel):
    """A worker exited: the sessions it held are gone."""

    kind: Literal["lost"] = "lost"
    worker: int
    why: str


class Ready(BaseModel):
    """A worker serves: its private port, the model it serves, its pid."""

    kind: Literal["ready"] = "ready"
    port: int
    model: str
    pid: int


class Failed(BaseModel):
    """A worker could not start (no engine, no tokenizer): why, as the gateway would have said it."""

    kind: Literal["failed"] = "failed"
    error: str


Message = Annotated[WorkerSpec | Peers | Lost | Ready | Failed, Field(discriminator="kind")]
_MESSAGE: TypeAdapter[Message] = TypeAdapter(Message)
_CONNECTION = b"c"
"""The one byte that carries a handed-over connection's descriptor."""
_MAX_PACKET = 1 << 16


async def wait_for_io(sock: socket.socket, *, write: bool = False, timeout: float | None = None) -> bool:
    """Wait until ``sock`` can be read (or written); False when ``timeout`` passed first."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    fd = sock.fileno()
    add, remove = (loop.add_writer, loop.remove_writer) if write else (loop.add_reader, loop.remove_reader)
    add(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await asyncio.wait_for(ready, timeout)
        return True
    except TimeoutError:
        return False
    finally:
        remove(fd)


class WorkerChannel:
    """One end of the socketpair between the front and a worker (non-blocking)."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self._sending = asyncio.Lock()  # one writer waits for room at a time, and messages keep their order

    @classmethod
    def pair(cls) -> tuple[WorkerChannel, socket.socket]:
        """The front's end, and the worker's (a plain socket, for the worker's command line and ``pass_fds``)."""
        front, worker = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        return cls(front), worker

    def fileno(self) -> int:
        return self.sock.fileno()

    async def send(self, message: BaseModel) -> None:
        await self._send(message.model_dump_json().encode(), [])

    async def hand_over(self, conn: socket.socket) -> None:
        """Send the connection's descriptor; the caller closes its own copy after."""
        await self._send(_CONNECTION, [conn.fileno()])

    async def _send(self, data: bytes, fds: list[int]) -> None:
        async with self._sending:
            while True:
                try:
                    socket.send_fds(self.sock, [data], fds)
                    return
                except BlockingIOError:  # the other side is behind on reading: wait for room
                    await wait_for_io(self.sock, write=True)

    async def receive(self) -> Message | socket.socket | None:
        """The next message or handed-over connection; None once the other side closed the channel."""
        while True:
            got = self.drain(limit=1)
            if got is None or got:
                return got[0] if got else None
            await wait_for_io(self.sock)

    def drain(self, limit: int | None = None) -> list[Message | socket.socket] | None:
        """What has arrived, without waiting (``limit``: at most that many); None once the channel is closed."""
        got: list[Message | socket.socket] = []
        while limit is None or len(got) < limit:
            try:
                data, fds, _flags, _addr = socket.recv_fds(self.sock, _MAX_PACKET, 4)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                return None
            if not data and not fds:
                return None if not got else got  # closed; what came before it is still delivered
            if fds:
                got.extend(socket.socket(fileno=fd) for fd in fds)
            else:
                got.append(_MESSAGE.validate_json(data))
        return got

    def close(self) -> None:
        self.sock.close()
