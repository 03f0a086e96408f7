"""Liveness probes never reuse a connection: an engine closing an idle keep-alive connection must not read as dead.

uvicorn (vLLM's server) closes keep-alive connections idle for 5 s. A probe sent on a pooled
connection just as the engine closes it fails at once (``ReadError``), and a failed probe makes
the open requests of every waiting trial ``infra``. Seen in the demo matrix: "the engine did not
answer a liveness probe: EngineUnavailableError … ReadError" from a healthy engine.
"""

from __future__ import annotations

import asyncio
import json

from fake_engine import COMPLETION, read_request

from tackroom_gateway import EngineClient, EngineSettings


async def _engine_that_closes_as_a_second_request_arrives() -> tuple[asyncio.Server, list[int]]:
    """Answers the first request of a connection (keep-alive), then closes it when the next one comes: the race
    of a server's idle-connection timeout, made certain."""
    per_connection: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        per_connection.append(0)
        try:
            while True:
                await read_request(reader)
                per_connection[-1] += 1
                if per_connection[-1] > 1:
                    return
                body = json.dumps(COMPLETION).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: keep-alive\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0), per_connection


async def test_every_probe_opens_its_own_connection() -> None:
    server, per_connection = await _engine_that_closes_as_a_second_request_arrives()
    port = server.sockets[0].getsockname()[1]
    client = EngineClient(EngineSettings(base_url=f"http://127.0.0.1:{port}/v1", retries=0))
    try:
        outcomes = [await client.probe([1, 2], timeout_s=5) for _ in range(3)]
    finally:
        await client.aclose()
        server.close()
    assert outcomes == [None, None, None], outcomes
    assert per_connection == [1, 1, 1]
