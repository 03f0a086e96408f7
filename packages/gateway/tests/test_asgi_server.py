"""InLoopServer: an ASGI app on loopback inside the running loop (gateway, scripted chat, relays, Tinker endpoint)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

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


SERVING_WHEN_INTERRUPTED = """
import asyncio, logging, signal, sys
from pathlib import Path
import httpx
from tackroom_app import run_to_completion
from tackroom_gateway import asgi_server

signal.signal(signal.SIGINT, signal.default_int_handler)  # not inherited as ignored from the test runner
if sys.argv[2] == "unfiltered":
    logging.getLogger("uvicorn.error").removeFilter(asgi_server._not_a_cancelled_request)
marks = Path(sys.argv[1])

async def slow(scope, receive, send):
    await asyncio.sleep(600)  # a completion still being generated when Ctrl-C comes

async def work():
    server = asgi_server.InLoopServer(slow, what="slow")
    port = await server.start()
    try:
        async with httpx.AsyncClient(timeout=None) as client:
            requests = [asyncio.create_task(client.get(f"http://127.0.0.1:{port}/")) for _ in range(3)]
            await asyncio.sleep(0.5)
            marks.joinpath("started").touch()
            await asyncio.gather(*requests)
    finally:
        await server.stop()
        marks.joinpath("cleaned").touch()

run_to_completion(work())
"""


@pytest.mark.parametrize("logging_", ["filtered", "unfiltered"])
def test_ctrl_c_while_requests_are_served_prints_one_line_not_a_traceback_per_request(tmp_path: Path,
                                                                                        logging_: str) -> None:
    """A Ctrl-C during a training run printed 23 uvicorn tracebacks ("Exception in ASGI application ...
    CancelledError"), one per request in flight; the unfiltered run shows the test sees them."""
    proc = subprocess.Popen([sys.executable, "-c", SERVING_WHEN_INTERRUPTED, str(tmp_path), logging_],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert (tmp_path / "cleaned").exists() and proc.returncode == 130, err
    if logging_ == "filtered":
        assert err.strip() == "error: interrupted: what the run started has been stopped"
    else:
        assert err.count("Exception in ASGI application") == 3, err


async def test_a_stop_inside_a_cancelled_task_does_not_wait_for_the_open_requests() -> None:
    async def slow(scope, receive, send):
        await asyncio.sleep(600)

    server = InLoopServer(slow, what="slow", stop_timeout_s=30)
    port = await server.start()

    async def work() -> None:
        try:
            async with httpx.AsyncClient(timeout=None) as client:
                await client.get(f"http://127.0.0.1:{port}/")
        finally:
            await server.stop()  # not forced by the caller: the cancellation forces it

    task = asyncio.create_task(work())
    await asyncio.sleep(0.5)
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 10, "stop() waited for requests of the work that was cancelled"


async def test_no_request_runs_on_after_stop_returns() -> None:
    """The Tinker sampling proxy closed its engine client right after stop(); requests uvicorn was still handling
    then failed with "client has been closed" tracebacks. stop() cancels and awaits them first."""
    ended: list[str] = []

    async def slow(scope, receive, send):
        try:
            await asyncio.sleep(600)
        finally:
            ended.append("request")

    server = InLoopServer(slow, what="slow", stop_timeout_s=30)
    port = await server.start()
    async with httpx.AsyncClient(timeout=None) as client:
        requests = [asyncio.create_task(client.get(f"http://127.0.0.1:{port}/")) for _ in range(2)]
        await asyncio.sleep(0.5)
        started = time.monotonic()
        await server.stop(force=True)
        assert ended == ["request", "request"]
        assert time.monotonic() - started < 10, "a forced stop waited for connections its requests kept open"
        for request in requests:
            request.cancel()
        await asyncio.gather(*requests, return_exceptions=True)
