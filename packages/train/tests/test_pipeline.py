"""The fully-async pipeline (tinker/pipeline.py) with a fake sampler and a fake (slow) trainer: staleness is
bounded and a batch past it is never trained on; every batch carries the version it was sampled with;
an engine that dies mid-run stops the run with its error."""

from __future__ import annotations

import asyncio

import pytest

from tackroom_train.tinker.pipeline import EngineSamplingError, run_pipeline


class Fake:
    def __init__(self, *, rollout_s: float = 0.01, train_s: float = 0.01, die_at: int | None = None,
                 signal: bool = True) -> None:
        self.rollout_s, self.train_s, self.die_at, self.signal = rollout_s, train_s, die_at, signal
        self.published = 0
        self.sampled: list[tuple[int, int]] = []  # (batch index, version the sampler was pinned to)
        self.trained: list[tuple[int, int, int]] = []  # (step, batch index, staleness)
        self.training = False
        self.overlapped = 0  # rollouts started while a step trained

    async def rollout(self, index: int, version: int) -> dict:
        assert version == self.published, "a batch started with a version that is not the published one"
        if self.training:
            self.overlapped += 1
        if self.die_at is not None and index == self.die_at:
            raise EngineSamplingError(f"the engine on port 8013 died during batch {index}")
        self.sampled.append((index, version))
        await asyncio.sleep(self.rollout_s)
        return {"index": index}

    async def train(self, sampled, step: int, staleness: int):
        self.training = True
        await asyncio.sleep(self.train_s)
        self.training = False
        assert sampled.output["index"] == sampled.index
        self.trained.append((step, sampled.index, staleness))
        return self.signal, {"step": step}

    async def publish(self, version: int) -> float:
        await asyncio.sleep(0.001)
        self.published = version
        return 0.001


def _run(fake: Fake, **kw):
    return asyncio.run(run_pipeline(rollout=fake.rollout, train=fake.train, publish=fake.publish, **kw))


@pytest.mark.parametrize("max_staleness", [0, 1, 2])
def test_a_slow_trainer_never_trains_past_the_staleness_bound(max_staleness: int) -> None:
    fake = Fake(rollout_s=0.005, train_s=0.05)
    result = _run(fake, steps=6, max_staleness=max_staleness)
    assert [t.step for t in result.steps] == [1, 2, 3, 4, 5, 6] and result.version == 6
    assert max(s for _, _, s in fake.trained) <= max_staleness
    assert not result.dropped  # the producer waited instead of sampling what could not be trained
    assert len(fake.sampled) == 6  # and drew no batch beyond the last step's
    # the trainer gets what the producer sampled, with the staleness its version implies
    versions = dict(fake.sampled)
    for t in result.steps:
        assert t.sampled.version == versions[t.sampled.index]
        assert t.staleness == (t.step - 1) - t.sampled.version
    if max_staleness == 0:
        assert fake.overlapped == 0  # synchronous: every batch is sampled with the latest weights
    else:
        assert fake.overlapped >= 4  # rollouts for step N+1 ran while step N trained
        assert max(s for _, _, s in fake.trained) == max_staleness  # and the bound was reached


def test_batches_past_the_bound_are_dropped_never_trained() -> None:
    """A producer allowed further ahead than the bound (lookahead 3, staleness 0) with a slow trainer:
    every batch sampled before the last update is dropped when its turn comes, and more are drawn."""
    fake = Fake(rollout_s=0.001, train_s=0.05)
    dropped = []
    result = _run(fake, steps=4, max_staleness=0, lookahead=3, on_drop=dropped.append)
    assert len(result.steps) == 4 and all(s == 0 for _, _, s in fake.trained)
    assert result.dropped and result.dropped == dropped
    assert all(d.staleness > 0 and d.step is None for d in result.dropped)
    trained = {i for _, i, _ in fake.trained}
    assert not trained & {d.sampled.index for d in result.dropped}
    assert len(fake.sampled) <= 4 + len(result.dropped)


def test_a_step_without_signal_publishes_no_version() -> None:
    fake = Fake(signal=False)
    result = _run(fake, steps=3, max_staleness=1)
    assert result.version == 0 and fake.published == 0
    assert all(not t.changed and t.handoff_s is None for t in result.steps)


def test_an_engine_that_dies_mid_run_stops_it_with_the_error() -> None:
    fake = Fake(train_s=0.02, die_at=3)
    with pytest.raises(EngineSamplingError, match="died during batch 3"):
        _run(fake, steps=6, max_staleness=1)
    assert [i for _, i, _ in fake.trained] == [1, 2][:len(fake.trained)]
    assert len(fake.trained) <= 2  # nothing after the death is trained


def test_a_trainer_error_stops_the_producer() -> None:
    fake = Fake(rollout_s=0.01)

    async def broken(sampled, step, staleness):
        raise RuntimeError("forward_backward failed")

    with pytest.raises(RuntimeError, match="forward_backward failed"):
        asyncio.run(run_pipeline(rollout=fake.rollout, train=broken, publish=fake.publish, steps=3, max_staleness=1))
    assert len(fake.sampled) <= 2


# -- the engine-sampling proxy against a stand-in engine (the real one: test_engine_sampling.py) ----------------
def test_the_proxy_pins_the_batchs_adapter_and_a_failing_engine_stops_the_run(tmp_path) -> None:
    import json
    import tarfile

    import httpx
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from tackroom_gateway import InLoopServer
    from tackroom_train.tinker.engine_sampling import EngineSampling

    seen: dict[str, list] = {"models": [], "loaded": []}
    state = {"fail": False}

    async def completions(request):
        body = json.loads(await request.body())
        seen["models"].append(body["model"])
        if state["fail"]:
            return JSONResponse({"error": "engine core died"}, status_code=500)
        return JSONResponse({"choices": [{"text": "x", "token_ids": [1]}], "model": body["model"]})

    async def load(request):
        seen["loaded"].append(json.loads(await request.body()))
        return JSONResponse("Success")

    async def health(request):
        return JSONResponse({})

    engine = Starlette(routes=[Route("/v1/completions", completions, methods=["POST"]),
                               Route("/v1/load_lora_adapter", load, methods=["POST"]),
                               Route("/v1/unload_lora_adapter", load, methods=["POST"]),
                               Route("/health", health)])
    archive = tmp_path / "v.tar.gz"
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "adapter_config.json").write_text("{}")
    (tmp_path / "a" / "adapter_model.safetensors").write_bytes(b"x")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "a", arcname=".")

    async def scenario() -> None:
        server = InLoopServer(engine, what="stand-in engine")
        port = await server.start()
        try:
            async with EngineSampling(tmp_path / "run", "policy", engine_url=f"http://127.0.0.1:{port}",
                                      keep_versions=2) as sampling:
                async with httpx.AsyncClient(timeout=10) as client:
                    async def ask() -> httpx.Response:
                        return await client.post(f"{sampling.base_url}/completions",
                                                 json={"model": "policy", "prompt": [1, 2]})

                    assert (await ask()).status_code == 503  # nothing pinned yet: no sample of an unknown version
                    for v in (0, 1, 2):
                        assert await sampling.load(v, archive) >= 0
                    assert (tmp_path / "run" / "lora" / "v2" / "adapter_config.json").is_file()
                    assert sorted(sampling.adapters) == [1, 2]  # v0 unloaded: outside the kept window
                    with pytest.raises(EngineSamplingError, match="not loaded"):
                        sampling.pin(0)
                    sampling.pin(1)
                    assert (await ask()).status_code == 200
                    sampling.pin(2)
                    assert (await ask()).json()["model"] == sampling.adapter_name(2)
                    assert seen["models"][-2:] == [sampling.adapter_name(1), sampling.adapter_name(2)]
                    await sampling.check("batch 1")
                    state["fail"] = True
                    assert (await ask()).status_code == 500
                    with pytest.raises(EngineSamplingError, match="batch 2.*failed 1 request"):
                        await sampling.check("batch 2")
            assert seen["loaded"][0]["lora_path"].endswith("lora/v0")
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_the_run_never_takes_the_shared_port_or_a_busy_one(tmp_path) -> None:
    import socket

    from tackroom import ConfigError
    from tackroom_engine import EngineSettings
    from tackroom_train.tinker.engine_sampling import EngineSampling

    with pytest.raises(ConfigError, match="shared engine"):
        asyncio.run(EngineSampling(tmp_path, "p", settings=EngineSettings(port=8011, lora_rank=8)).start())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        with pytest.raises(ConfigError, match="in use"):
            asyncio.run(EngineSampling(tmp_path, "p", settings=EngineSettings(port=busy, lora_rank=8)).start())


def test_the_proxy_resends_a_request_lost_to_a_keep_alive_close_but_not_to_a_dead_engine(tmp_path) -> None:
    """uvicorn closes an idle connection after 5 s; a request sent on it at that moment reads nothing. The
    overfit run under CI stopped on one such ``ReadError`` at batch 7. The stand-in engine answers the first
    request of every connection and closes the connection when a second one comes on it."""
    import httpx

    from tackroom_train.tinker.engine_sampling import EngineSampling

    connections = {"n": 0}
    mode = {"dead": False}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections["n"] += 1
        answered = 0
        while not mode["dead"]:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
            await reader.readexactly(length)
            if answered:
                break  # the close race: the engine closes the idle connection as the request arrives
            body = b'{"choices": [{"text": "x", "token_ids": [1]}]}'
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
            answered += 1
        writer.close()

    async def scenario() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, EngineSampling(tmp_path / "run", "policy", engine_url=f"http://127.0.0.1:{port}") as sampling:
            sampling.adapters[0] = "v0"
            sampling.pin(0)
            async with httpx.AsyncClient(timeout=10) as client:
                for _ in range(3):
                    r = await client.post(f"{sampling.base_url}/completions", json={"model": "policy", "prompt": [1]})
                    assert r.status_code == 200, r.text
                assert sampling.failures == [] and connections["n"] >= 3
                mode["dead"] = True  # now every connection closes before answering: a failure, and the run stops
                r = await client.post(f"{sampling.base_url}/completions", json={"model": "policy", "prompt": [1]})
                assert r.status_code == 503 and len(sampling.failures) == 1, (r.text, sampling.failures)

    asyncio.run(scenario())


def test_a_batch_counts_its_staleness_from_its_oldest_token() -> None:
    """A batch whose turns were cut at a weight update and continued holds tokens of the version before the one it
    started with: its staleness counts from those (``oldest_version``), so the bound drops it where the version it
    started with alone would have let it through."""
    class Straddling(Fake):
        async def rollout(self, index: int, version: int) -> dict:
            out = await super().rollout(index, version)
            return {**out, "oldest": version - 1 if index == 3 else None}

    dropped: list = []
    fake = Straddling()
    result = _run(fake, steps=4, max_staleness=0, on_drop=dropped.append, oldest_version=lambda b: b["oldest"])
    assert [d.sampled.index for d in dropped] == [3]
    assert dropped[0].staleness == 1 and dropped[0].sampled.staleness_from == dropped[0].sampled.version - 1
    assert [t.sampled.index for t in result.steps] == [1, 2, 4, 5] and all(t.staleness == 0 for t in result.steps)

    trusting = _run(Straddling(), steps=4, max_staleness=0)  # without the read: the batch's start version only
    assert not trusting.dropped
