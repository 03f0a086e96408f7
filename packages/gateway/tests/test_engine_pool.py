"""The engine client's connections at RL concurrency: every request up to ``max_connections`` is in flight at once
and no more; those past it wait for a slot (at most the pool timeout, then ``EngineTimeoutError`` without reaching
the engine); the engine sees at most ``max_connections`` connections, and a second wave reuses them."""

from __future__ import annotations

import asyncio
import json

import pytest
from fake_engine import COMPLETION, read_request

from tackroom_gateway import EngineClient, EngineSettings, EngineTimeoutError, EngineTimeouts


class BarrierEngine:
    """Holds every request until ``wanted`` are open at once (or ``patience`` passes), then answers them all;
    counts connections, requests and the most requests open together."""

    def __init__(self, wanted: int, patience: float = 20.0) -> None:
        self.wanted, self.patience = wanted, patience
        self.connections = 0
        self.requests = 0
        self.open = self.most_open = 0
        self.released = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                await read_request(reader)
                self.requests += 1
                self.open += 1
                self.most_open = max(self.most_open, self.open)
                if self.open >= self.wanted:
                    self.released.set()
                try:
                    await asyncio.wait_for(self.released.wait(), self.patience)
                except TimeoutError:
                    pass
                self.open -= 1
                body = json.dumps(COMPLETION).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: keep-alive\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


async def serve(engine: BarrierEngine) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(engine.handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"


async def test_requests_up_to_max_connections_are_all_in_flight_and_connections_are_reused() -> None:
    engine = BarrierEngine(wanted=96)
    server, url = await serve(engine)
    client = EngineClient(EngineSettings(base_url=url, retries=0, max_connections=96))
    try:
        first = await asyncio.wait_for(asyncio.gather(*(client.complete({"prompt": [1, 2]}) for _ in range(96))), 60)
        assert engine.most_open == 96, "requests waited for a connection below the limit"
        opened = engine.connections
        engine.released.clear()
        engine.most_open = 0
        again = await asyncio.wait_for(asyncio.gather(*(client.complete({"prompt": [1, 2]}) for _ in range(96))), 60)
    finally:
        await client.aclose()
        server.close()
    assert all(c.completion_ids == [5] for c in first + again)
    assert opened == 96 and engine.most_open == 96
    assert engine.connections == opened, "the second wave reuses the kept-alive connections"


async def test_requests_past_max_connections_wait_for_a_slot() -> None:
    engine = BarrierEngine(wanted=4)
    server, url = await serve(engine)
    client = EngineClient(EngineSettings(base_url=url, retries=0, max_connections=4))
    try:
        done = await asyncio.wait_for(asyncio.gather(*(client.complete({"prompt": [1, 2]}) for _ in range(12))), 60)
    finally:
        await client.aclose()
        server.close()
    assert len(done) == 12 and engine.requests == 12
    assert engine.most_open == 4 and engine.connections == 4


async def test_a_request_that_gets_no_slot_within_the_pool_timeout_is_an_engine_timeout() -> None:
    engine = BarrierEngine(wanted=2, patience=3.0)  # holds the first request 3 s: the only slot stays taken
    server, url = await serve(engine)
    client = EngineClient(EngineSettings(base_url=url, retries=3, max_connections=1,
                                         timeouts=EngineTimeouts(pool=0.3)))
    try:
        first = asyncio.ensure_future(client.complete({"prompt": [1, 2]}))
        while engine.requests < 1:
            await asyncio.sleep(0.01)
        with pytest.raises(EngineTimeoutError, match="no free connection within 0.3s"):
            await client.complete({"prompt": [1, 2]})
        assert engine.requests == 1  # it never reached the engine, and a full pool is not retried
        assert (await first).completion_ids == [5]
    finally:
        await client.aclose()
        server.close()


async def test_a_finished_stream_gives_its_connection_back() -> None:
    """A stream read to its end (``[DONE]``, then the body's last chunk in a write of its own, as uvicorn sends it)
    leaves its connection open for the next one, rather than closed and a new one opened per stream."""
    connections = 0
    event = json.dumps({"choices": [{"index": 0, "text": "x", "token_ids": [5], "finish_reason": "length"}]})

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            while True:
                await read_request(reader)
                body = f"data: {event}\n\ndata: [DONE]\n\n".encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                             b"%x\r\n%s\r\n" % (len(body), body))
                await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    client = EngineClient(EngineSettings(base_url=f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1",
                                         model="m", retries=0))
    try:
        for _ in range(5):
            assert [c.token_ids async for c in client.stream({"prompt": [1, 2]})] == [[5]]
    finally:
        await client.aclose()
        server.close()
    assert connections == 1
