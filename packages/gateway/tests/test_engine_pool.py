"""The engine client's connections at RL concurrency: pools of 32 taken in turn (``ShardedPool``), because
httpcore's single pool did work quadratic in its connections on every request (the gateway's largest cost at 256
sessions, benchmarks/gateway_overhead.py). Every request up to ``max_connections`` is in flight at once, no more
than twice that many connections are ever opened, and a second wave reuses them."""

from __future__ import annotations

import asyncio
import json

from tackroom_gateway import EngineClient, EngineSettings
from tackroom_gateway.engine_client import ShardedPool

COMPLETION = {"choices": [{"index": 0, "text": "x", "token_ids": [5], "prompt_token_ids": [1, 2],
                           "finish_reason": "length", "stop_reason": None, "logprobs": None}]}


class BarrierEngine:
    """Holds every request until ``wanted`` are open at once (or ``patience`` passes), then answers them all;
    counts connections and the most requests open together."""

    def __init__(self, wanted: int, patience: float = 20.0) -> None:
        self.wanted, self.patience = wanted, patience
        self.connections = 0
        self.open = self.most_open = 0
        self.released = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
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


async def test_requests_up_to_max_connections_are_all_in_flight_and_connections_are_reused() -> None:
    engine = BarrierEngine(wanted=96)
    server = await asyncio.start_server(engine.handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
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
    assert 96 <= opened <= 2 * 96 and engine.most_open == 96
    assert engine.connections == opened, "the second wave reuses the kept-alive connections"


def test_shards_of_32_with_room_for_twice_their_share() -> None:
    def sizes(n: int) -> list[int]:
        return [p._max_connections for p in ShardedPool(n, keepalive_expiry=4.0)._pools]

    assert sizes(1) == [1] and sizes(32) == [32] and sizes(33) == [33, 33]
    assert sizes(256) == [64] * 8 and sizes(1000) == [64] * 32
