"""InLoopServer: an ASGI app on loopback inside the running loop (gateway, scripted chat, relays, Tinker endpoint)."""

from __future__ import annotations

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tackroom import InfraError
from tackroom_gateway.asgi_server import InLoopServer


def _app() -> Starlette:
    return Starlette(routes=[Route("/", lambda request: PlainTextResponse("hi"))])


async def test_serves_on_a_free_port_and_stops() -> None:
    server = InLoopServer(_app(), what="test server")
    port = await server.start()
    assert port == server.port and port > 0
    async with httpx.AsyncClient() as client:
        assert (await client.get(f"http://127.0.0.1:{port}/")).text == "hi"
    await server.stop()
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as client:
            await client.get(f"http://127.0.0.1:{port}/")
    await server.stop()  # twice is harmless


async def test_a_port_in_use_is_the_callers_error_naming_the_server() -> None:
    first = InLoopServer(_app(), what="first")
    port = await first.start()

    class MyError(Exception):
        pass

    second = InLoopServer(_app(), what="second server", port=port, error=MyError)
    try:
        with pytest.raises(MyError, match=f"second server failed to start on 127.0.0.1:{port}: could not bind"):
            await second.start()
    finally:
        await second.stop()
        await first.stop()


def test_default_error_is_infra() -> None:
    assert InLoopServer(_app(), what="x").error is InfraError


async def test_in_loop_servers_leave_sigint_to_the_application():
    # uvicorn's own handler would stop only the server on Ctrl-C, and the run would go on without it.
    import signal

    from tackroom_gateway.asgi_server import InLoopServer

    async def app(scope, receive, send):  # pragma: no cover - never called
        raise AssertionError

    before = signal.getsignal(signal.SIGINT)
    server = InLoopServer(app, what="probe")
    await server.start()
    try:
        assert signal.getsignal(signal.SIGINT) is before
    finally:
        await server.stop()
