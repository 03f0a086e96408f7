"""NamespacePorts' forwards: what local and docker hold for ``forward_host_port``. End to end (an agent in a sandbox
without network reaching that one port and nothing else) it is checked by core's tests/test_agent_in_sandbox.py on
``local`` and the docker attack suite; here, the part's own bookkeeping and its errors, on this process's own
network namespace."""

from __future__ import annotations

import asyncio
import os

import pytest

from tackroom import NetworkPolicy, SandboxError
from tackroom_sandbox_kit import NamespacePorts


def Forwarding() -> NamespacePorts:
    """The part alone, as a sandbox in this process's namespaces (no user namespace to enter) holds it."""
    return NamespacePorts(NetworkPolicy(), notes=[], enter_user=False)


async def test_closing_without_a_forward_is_a_no_op():
    await Forwarding().close_forwards()


async def test_a_process_that_is_gone_is_a_sandbox_error_naming_it():
    gone = await asyncio.create_subprocess_exec("true")
    await gone.wait()
    with pytest.raises(SandboxError, match=rf"could not open a port inside the sandbox's network namespace "
                                           rf"\(process {gone.pid}\)"):
        await Forwarding().forward(gone.pid, 9)


@pytest.mark.skipif(os.geteuid() != 0, reason="entering a network namespace by pid needs root (CAP_SYS_ADMIN)")
async def test_a_forward_reaches_the_host_port_until_it_is_closed():
    async def answer(reader, writer):
        writer.write(b"policy\n")
        await writer.drain()
        writer.close()

    upstream = await asyncio.start_server(answer, "127.0.0.1", 0)
    sandbox = Forwarding()
    try:
        url = await sandbox.forward(os.getpid(), upstream.sockets[0].getsockname()[1])
        assert url.startswith("http://127.0.0.1:")
        port = int(url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(reader.readline(), 10) == b"policy\n"
        writer.close()
        await sandbox.close_forwards()
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)
        await sandbox.close_forwards()  # twice: nothing left to close
    finally:
        await sandbox.close_forwards()
        upstream.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="entering a network namespace by pid needs root (CAP_SYS_ADMIN)")
async def test_closing_with_a_connection_open_ends_it_quietly():
    """A trial's end closes a forward while the agent's connection is open: the connection ends and asyncio reports
    nothing (Python 3.12's stream callback read a cancelled handler's exception: a CancelledError traceback)."""
    reported: list[dict] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))

    async def hold(reader, writer):
        await reader.read()  # until the forward closes its side
        writer.close()

    upstream = await asyncio.start_server(hold, "127.0.0.1", 0)
    sandbox = Forwarding()
    try:
        url = await sandbox.forward(os.getpid(), upstream.sockets[0].getsockname()[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1]))
        writer.write(b"GET / HTTP/1.1\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.2)  # the forward has accepted it and opened the upstream
        await sandbox.close_forwards()
        assert await asyncio.wait_for(reader.read(), 10) == b""
        await asyncio.sleep(0.1)  # the done callbacks of the closed connection run
        assert reported == []
    finally:
        loop.set_exception_handler(None)
        await sandbox.close_forwards()
        upstream.close()
