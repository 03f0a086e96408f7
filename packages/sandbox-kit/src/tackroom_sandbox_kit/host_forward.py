"""Reach one host port from inside a sandbox that has no network: a listening socket in its namespace.

A harness whose agent runs inside the sandbox (OpenCode) must call the policy,
which listens on the host's loopback. Giving the sandbox the host network for
that would also give the agent the engine, every other host port and the
internet. Instead, a short-lived helper process enters the sandbox's network
namespace (and, for an unprivileged user, the user namespace that owns it),
opens a listening TCP socket on the sandbox's ``127.0.0.1``, hands the socket
back over ``SCM_RIGHTS`` and exits. The host process accepts on that socket and
pipes each connection to the one host address it was opened for. Nothing runs
inside the sandbox: the agent can connect to that one port, and cannot kill,
replace or redirect the forwarder.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
from typing import Self

from tackroom import SandboxError

_HELPER = r"""
import os, socket, sys
pid, port, enter_user, fd = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
user = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY) if enter_user else None
net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
try:
    os.setns(net, os.CLONE_NEWNET)  # root: directly
except PermissionError:
    if user is None:
        raise
    os.setns(user, os.CLONE_NEWUSER)  # the namespace's unprivileged owner: through its user namespace
    os.setns(net, os.CLONE_NEWNET)
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port))
s.listen(64)
socket.send_fds(socket.socket(fileno=fd), [b"ok"], [s.fileno()])
"""


def listen_in_namespace(pid: int, port: int = 0, *, enter_user: bool, timeout: float = 10.0) -> socket.socket:
    """A TCP socket listening on ``127.0.0.1:port`` inside the network namespace of host process ``pid``.

    ``enter_user``: when the network namespace cannot be entered directly (tackroom is not root), join
    ``pid``'s user namespace first: how the unprivileged owner of a rootless sandbox's namespaces acts in them.
    Raises :class:`SandboxError` with the reason when the namespace cannot be entered.
    """
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # -I: nothing from the working directory or the environment is imported; one thread, so setns(user) works.
        proc = subprocess.run(
            [sys.executable, "-I", "-c", _HELPER, str(pid), str(port), "1" if enter_user else "0", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), capture_output=True, timeout=timeout, env={}, check=False,
        )  # fmt: skip
        theirs.close()
        if proc.returncode != 0:
            reason = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise SandboxError(
                f"could not open a port inside the sandbox's network namespace (process {pid}): {reason[0]}. "
                "Entering another network namespace needs the rights over it: the owner of a rootless sandbox's "
                "user namespace, or root (CAP_SYS_ADMIN) for a container's"
            )
        mine.settimeout(timeout)
        _, fds, _, _ = socket.recv_fds(mine, 16, 1)
        if not fds:
            raise SandboxError("the namespace helper exited without handing over the listening socket")
        listener = socket.socket(fileno=fds[0])
        listener.setblocking(False)
        return listener
    except subprocess.TimeoutExpired as exc:
        raise SandboxError(f"opening a port inside the sandbox took longer than {timeout}s") from exc
    finally:
        mine.close()
        with contextlib.suppress(OSError):
            theirs.close()


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            if writer.can_write_eof():
                writer.write_eof()


class SandboxListener:
    """A server on ``listener`` (a socket inside a sandbox), tracking the connection each ``_serve`` handles so that
    :meth:`close` ends the server and every one of them. Subclasses say what a connection does (:meth:`_serve`)."""

    read_limit = 2**16
    """asyncio's buffer limit for each connection's reader."""

    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.port: int = listener.getsockname()[1]
        """The port inside the sandbox (on its 127.0.0.1)."""
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()
        self._closing = False

    async def start(self) -> Self:
        self._server = await asyncio.start_server(self._handle, sock=self.listener, limit=self.read_limit)
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            # close() cancelled it: end normally. asyncio's stream callback reads the handler task's exception,
            # and on a cancelled task (Python 3.12.1) that raises and logs a CancelledError traceback.
            if not self._closing:
                raise
        finally:
            self._conns.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        self._closing = True
        if self._server is not None:
            self._server.close()
        for task in list(self._conns):
            task.cancel()
        for task in list(self._conns):
            with contextlib.suppress(BaseException):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
        self.listener.close()


class HostPortForward(SandboxListener):
    """Accepts on a socket inside a sandbox and pipes every connection to ``target_host:target_port`` on the host."""

    def __init__(self, listener: socket.socket, target_host: str, target_port: int) -> None:
        super().__init__(listener)
        self.target = (target_host, target_port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                w.close()


async def forward_into_namespace(pid: int, target_port: int, *, enter_user: bool, target_host: str = "127.0.0.1",
                                 port: int | None = None) -> HostPortForward:
    """Open ``port`` (default: the same number as ``target_port``, else any) inside ``pid``'s network namespace
    and forward it to ``target_host:target_port`` on the host; close the returned forward when done."""
    wanted = target_port if port is None else port
    try:
        listener = await asyncio.to_thread(listen_in_namespace, pid, wanted, enter_user=enter_user)
    except SandboxError:
        if port is not None or wanted == 0:
            raise
        listener = await asyncio.to_thread(listen_in_namespace, pid, 0, enter_user=enter_user)
    return await HostPortForward(listener, target_host, target_port).start()
