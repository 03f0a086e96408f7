"""Rollouts on a vLLM engine with the live LoRA (``[tinker] sampler = "engine"``, the default).

The run starts its own engine (``tackroom model up``'s, on ``[tinker] engine_port``, never the shared
8011) serving the base model with LoRA enabled and runtime adapter loading. After each optimiser step the
trainer's LoRA is saved (SkyRL writes a PEFT adapter: ``adapter_config.json`` +
``adapter_model.safetensors``), unpacked into ``<run>/lora/v<N>`` and added to the engine as
``<run>-<nonce>-v<N>`` (``POST /v1/load_lora_adapter``) before any batch samples with version N.

Harnesses and the gateway reach the engine through a small proxy (:class:`EngineSampling`): it pins every
request of a batch to that batch's adapter (whatever model name the harness sends) and remembers every
failure of the engine (no connection, 5xx, the adapter unknown). :meth:`EngineSampling.check` turns those,
or an engine process that is gone, into :class:`~.pipeline.EngineSamplingError`: the run stops instead of
training on rollouts that failed (masked as ``infra``) or were sampled from another policy.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tackroom import ConfigError
from tackroom_gateway import InLoopServer
from tackroom_train.tinker.pipeline import EngineSamplingError
from tackroom_train.tinker.policy import unpack_adapter

SHARED_PORT = 8011
# What a request sent on a kept-alive connection the engine is closing at that moment fails with: the harness got
# nothing from it, so sending it again is safe (a timeout is not one of these: the engine may still be working)
CLOSE_RACE = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError, httpx.ConnectError)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "server_error", "code": status}}, status_code=status)


class EngineSampling:
    """The run's engine and the proxy in front of it. ``engine_url`` given: use that engine (tests);
    otherwise :meth:`start` starts one with ``settings`` (a ``tackroom_engine.EngineSettings``)."""

    def __init__(self, run_dir: str | Path, model_name: str, *, settings: Any = None, engine_url: str | None = None,
                 keep_versions: int = 2, timeout_s: float = 900.0) -> None:
        if settings is None and engine_url is None:
            raise ValueError("give the engine's settings or its URL")
        self.run_dir = Path(run_dir)
        self.model_name = model_name
        self.settings = settings
        self.engine_url = engine_url.rstrip("/") if engine_url else None
        self.keep_versions = max(keep_versions, 1)
        self.timeout_s = timeout_s
        self.prefix = f"{self.run_dir.name}-{secrets.token_hex(3)}"
        self.adapters: dict[int, str] = {}
        """Policy version → adapter name on the engine (the loaded ones)."""
        self.adapter: str | None = None
        """The adapter every proxied request samples with now (the batch's version)."""
        self.version: int | None = None
        self.failures: list[str] = []
        self.requests = 0
        self.requests_by_version: dict[int, int] = {}
        """Completions answered per policy version (the version pinned when the request arrived)."""
        self.straddled = 0
        """Requests whose batch's pin moved while the engine answered them (the pipeline pins per batch: 0)."""
        self._state: Any = None
        self._client: httpx.AsyncClient | None = None
        self.app = Starlette(routes=[
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/v1/completions", self._completions, methods=["POST"]),
            Route("/health", self._health, methods=["GET"]),
        ])
        self._server = InLoopServer(self.app, what="the engine-sampling proxy", error=EngineSamplingError)
        self.port: int | None = None
        self._owns_engine = False
        self._stopped = False

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def adapter_name(self, version: int) -> str:
        return f"{self.prefix}-v{version}"

    async def start(self) -> EngineSampling:
        """Start the engine (unless given by URL) and the proxy; a second call does nothing."""
        if self.port is not None:
            return self
        if self.engine_url is None:
            from tackroom_engine import engine

            port = self.settings.port
            if port == SHARED_PORT:
                raise ConfigError(f"[tinker] engine_port = {port} is the shared engine's port; the run starts its own "
                                  "engine with LoRA enabled on another one (default 8013)")
            if engine._port_in_use(self.settings.host, port):
                raise ConfigError(f"[tinker] engine_port = {port} is in use (another run's engine? `tackroom model "
                                  f"status`); stop it with `tackroom model down --port {port}` or pick another port")
            self._owns_engine = True  # the port was free: what starts there now is ours to stop
            self._state = await asyncio.to_thread(engine.up, self.settings, lambda m: None)
            self.engine_url = self._state.base_url.removesuffix("/v1")
        # Idle connections are let go well before the engine's keep-alive timeout (uvicorn's, 5 s) closes them: a
        # request sent on a connection the engine closes at that moment reads nothing (the gateway does the same)
        self._client = httpx.AsyncClient(timeout=self.timeout_s, limits=httpx.Limits(keepalive_expiry=1.0))
        self.port = await self._server.start()
        return self

    async def stop(self) -> None:
        """Stop the proxy and the engine this object started (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        if self.port is not None:
            await self._server.stop()
        if self._client is not None:
            await self._client.aclose()
        if self._owns_engine:
            from tackroom_engine import engine

            await asyncio.to_thread(engine.down, self.settings.port)

    async def __aenter__(self) -> EngineSampling:
        try:
            return await self.start()
        except BaseException:
            await self.stop()
            raise

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- the engine ---------------------------------------------------------------------
    def _log_tail(self) -> str:
        if self._state is None:
            return ""
        log = Path(self._state.log)
        return f"; end of {log}:\n{log.read_text(errors='replace')[-2000:]}" if log.is_file() else ""

    def alive(self) -> bool:
        if self._state is not None:
            from tackroom_engine import engine

            if not engine._alive(self._state.pid, self._state.proc_start):
                return False
        try:
            return httpx.get(f"{self.engine_url}/health", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    async def check(self, what: str) -> None:
        """Raise :class:`EngineSamplingError` when the engine failed a request or is gone."""
        if self.failures:
            raise EngineSamplingError(f"{what}: the engine at {self.engine_url} failed {len(self.failures)} "
                                      f"request(s), first: {self.failures[0]}{self._log_tail()}")
        if not await asyncio.to_thread(self.alive):
            raise EngineSamplingError(f"{what}: the engine at {self.engine_url} is gone (no /health){self._log_tail()}")

    async def load(self, version: int, archive: str | Path) -> float:
        """Unpack the LoRA of ``version`` into ``<run>/lora/v<N>`` and add it to the engine; seconds taken."""
        t0 = time.monotonic()
        folder = await asyncio.to_thread(unpack_adapter, archive, self.run_dir / "lora" / f"v{version}")
        name = self.adapter_name(version)
        assert self._client is not None
        try:
            r = await self._client.post(f"{self.engine_url}/v1/load_lora_adapter",
                                        json={"lora_name": name, "lora_path": str(folder)})
        except httpx.HTTPError as exc:
            raise EngineSamplingError(f"loading policy version {version} into the engine at {self.engine_url}: "
                                      f"{type(exc).__name__}: {exc}{self._log_tail()}") from exc
        if r.status_code != 200:
            raise EngineSamplingError(f"the engine at {self.engine_url} refused policy version {version} "
                                      f"({folder}): {r.status_code} {r.text[:500]}")
        self.adapters[version] = name
        for old in sorted(v for v in self.adapters if v <= version - self.keep_versions):
            await self._client.post(f"{self.engine_url}/v1/unload_lora_adapter", json={"lora_name": self.adapters.pop(old)})
        return time.monotonic() - t0

    def pin(self, version: int) -> None:
        """Every request from now on samples with ``version`` (loaded before)."""
        if version not in self.adapters:
            raise EngineSamplingError(f"policy version {version} is not loaded in the engine (loaded: "
                                      f"{sorted(self.adapters)})")
        self.version, self.adapter = version, self.adapters[version]

    async def free_sample(self, version: int, prompt_ids: list[int], max_tokens: int = 24) -> tuple[list[int], list[float]]:
        """A completion of ``prompt_ids`` by ``version``'s adapter with no grammar (temperature 1, a fixed seed), and
        its logprobs: what the trainer's forward on the same ids must agree with when every trained token of a
        step was sampled under a grammar (whose logprobs are not the model's own)."""
        if version not in self.adapters:
            raise EngineSamplingError(f"policy version {version} is not loaded in the engine")
        assert self._client is not None
        body = {"model": self.adapters[version], "prompt": list(prompt_ids), "max_tokens": max_tokens,
                "temperature": 1.0, "seed": 1234, "logprobs": 0, "return_token_ids": True}
        try:
            r = await self._client.post(f"{self.engine_url}/v1/completions", json=body)
            r.raise_for_status()
            choice = r.json()["choices"][0]
            ids = [int(i) for i in choice["token_ids"]]
            logprobs = [float(x) for x in choice["logprobs"]["token_logprobs"]]
        except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as exc:
            self.failures.append(f"free sample: {type(exc).__name__}: {exc}")
            raise EngineSamplingError(f"the engine's free sample for the mismatch failed: {type(exc).__name__}: "
                                      f"{exc}") from exc
        if len(ids) != len(logprobs):
            raise EngineSamplingError(f"the engine's free sample has {len(ids)} ids and {len(logprobs)} logprobs")
        return ids, logprobs

    # -- the proxy ----------------------------------------------------------------------
    async def _health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": self.model_name})

    async def _models(self, request: Request) -> Response:
        entry: dict[str, Any] = {"id": self.model_name, "object": "model", "owned_by": "tackroom-engine"}
        if self.settings is not None:
            entry["max_model_len"] = self.settings.max_model_len
        return JSONResponse({"object": "list", "data": [entry]})

    async def _completions(self, request: Request) -> Response:
        if self.adapter is None:
            return _error(503, "no policy version is pinned yet")
        try:
            body = json.loads(await request.body())
        except ValueError as exc:
            return _error(400, f"not JSON: {exc}")
        adapter, version = self.adapter, self.version
        body["model"] = adapter
        self.requests += 1
        assert self._client is not None and version is not None
        try:
            try:
                r = await self._client.post(f"{self.engine_url}/v1/completions", json=body)
            except CLOSE_RACE:
                # that close race, or the engine is gone: once more on a fresh connection tells them apart
                r = await self._client.post(f"{self.engine_url}/v1/completions", json=body)
        except httpx.HTTPError as exc:
            self.failures.append(f"{type(exc).__name__}: {exc}")
            return _error(503, f"the engine did not answer: {type(exc).__name__}: {exc}")
        if r.status_code >= 500 or r.status_code == 404:
            self.failures.append(f"{r.status_code} {r.text[:300]}")
        if r.status_code != 200 or body.get("stream"):
            return Response(r.content, status_code=r.status_code,
                            media_type=r.headers.get("content-type", "application/json"))
        self.requests_by_version[version] = self.requests_by_version.get(version, 0) + 1
        if self.version != version:
            self.straddled += 1
        data = r.json()
        data["policy_version"] = version  # the turn records it (TokenTurn.policy_version)
        return JSONResponse(data)
