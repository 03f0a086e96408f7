"""The service's Python client, sync (:class:`ServeClient`) and async (:class:`AsyncServeClient`), on httpx.

```python
from tackroom_serve.client import ServeClient
with ServeClient("http://127.0.0.1:8300", token) as serve:
    batch = serve.create_batch({"tasks": ["examples/tasks"], "harness": {"name": "oracle"}}, samples=4,
                               idempotency_key="step-17")
    for outcome in serve.results(batch.id):        # each finished attempt, as it finishes
        print(outcome.task_id, outcome.reward, outcome.trajectory.token_ids[:8])
```

Each method is one request (described once, in :class:`Requests`) parsed into the API's models; an error answer
raises :class:`ServeError` with its status, code and message. :meth:`ServeClient.results` follows the batch's
server-sent events and reconnects with ``Last-Event-ID`` when the connection drops. It imports neither starlette
nor SQLAlchemy.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import BaseModel

from tackroom_app import RunConfig
from tackroom_serve.models import (
    BatchList,
    BatchView,
    Health,
    Outcome,
    RetryResult,
    RolloutList,
    RolloutView,
    SqlResult,
    plain_json,
)

RECONNECTS = 5
PAGE = 500


class ServeError(Exception):
    """An error answer: ``status`` (HTTP), ``code`` (stable, e.g. ``idempotency_key_reused``) and the message."""

    def __init__(self, status: int, code: str, message: str, body: Any = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message, self.body = status, code, message, body


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    model: type[BaseModel]
    json: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


class Requests:
    """What each client method sends, and the model its answer is."""

    @staticmethod
    def create_batch(config: RunConfig | dict[str, Any], samples: int, policy_version: int | None,
                     metadata: dict[str, str] | None, idempotency_key: str | None) -> Request:
        body: dict[str, Any] = {"config": plain_json(config), "samples": samples}
        if policy_version is not None:
            body["policy_version"] = policy_version
        if metadata:
            body["metadata"] = metadata
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else {}
        return Request("POST", "/v1/batches", BatchView, json=body, headers=headers)

    @staticmethod
    def health() -> Request:
        return Request("GET", "/v1/health", Health)

    @staticmethod
    def get_batch(batch_id: str) -> Request:
        return Request("GET", f"/v1/batches/{batch_id}", BatchView)

    @staticmethod
    def list_batches(state: str | None, limit: int, before: int | None) -> Request:
        params = {k: v for k, v in (("state", state), ("limit", limit), ("before", before)) if v is not None}
        return Request("GET", "/v1/batches", BatchList, params=params)

    @staticmethod
    def rollouts_page(batch_id: str, state: str | None, after: int, trajectory: bool) -> Request:
        params: dict[str, Any] = {"after": after, "limit": PAGE, "trajectory": str(trajectory).lower()}
        if state is not None:
            params["state"] = state
        return Request("GET", f"/v1/batches/{batch_id}/rollouts", RolloutList, params=params)

    @staticmethod
    def get_rollout(rollout_id: str, trajectory: bool) -> Request:
        return Request("GET", f"/v1/rollouts/{rollout_id}", RolloutView,
                       params={"trajectory": str(trajectory).lower()})

    @staticmethod
    def action(kind: str, item_id: str, verb: str, body: dict[str, Any] | None = None) -> Request:
        model = {"batches": BatchView, "rollouts": RolloutView}[kind]
        if kind == "batches" and verb == "retry":
            model = RetryResult
        return Request("POST", f"/v1/{kind}/{item_id}/{verb}", model, json=body or {})

    @staticmethod
    def sql(query: str, max_rows: int, timeout_sec: float) -> Request:
        return Request("POST", "/v1/sql", SqlResult,
                       json={"query": query, "max_rows": max_rows, "timeout_sec": timeout_sec})


def parsed(response: httpx.Response, model: type[BaseModel]) -> Any:
    """The answer as ``model``, or :class:`ServeError`."""
    if response.status_code >= 400:
        try:
            body = response.json()
            error = body.get("error", {})
            code, message = error.get("code", "error"), error.get("message", response.text)
        except ValueError:
            body, code, message = response.text, "error", response.text[:500]
        raise ServeError(response.status_code, code, message, body)
    return model.model_validate(response.json())


class EventParser:
    """Server-sent events, a line at a time: :meth:`feed` returns ``(event, data)`` at each blank line."""

    def __init__(self) -> None:
        self.event, self.data = "message", []

    def feed(self, line: str) -> tuple[str, str] | None:
        if not line:
            done = (self.event, "\n".join(self.data)) if self.data else None
            self.event, self.data = "message", []
            return done
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self.event = value
        elif name == "data":
            self.data.append(value)
        return None


class ServeClient:
    """A blocking client; also a context manager (closes its connections)."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 60.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self._http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout, transport=transport,
                                  headers={"Authorization": f"Bearer {token}"})

    @property
    def base_url(self) -> str:
        return str(self._http.base_url)

    def __enter__(self) -> ServeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def send(self, r: Request) -> Any:
        response = self._http.request(r.method, r.path, json=r.json, params=r.params or None, headers=r.headers)
        return parsed(response, r.model)

    def create_batch(self, config: RunConfig | dict[str, Any], *, samples: int = 1, policy_version: int | None = None,
                     metadata: dict[str, str] | None = None, idempotency_key: str | None = None) -> BatchView:
        return self.send(Requests.create_batch(config, samples, policy_version, metadata, idempotency_key))

    def health(self) -> Health:
        """``GET /v1/health`` (needs no token): the service's version, database dialect and running trials."""
        return self.send(Requests.health())

    def get_batch(self, batch_id: str) -> BatchView:
        return self.send(Requests.get_batch(batch_id))

    def list_batches(self, *, state: str | None = None, limit: int = 100, before: int | None = None) -> list[BatchView]:
        return self.send(Requests.list_batches(state, limit, before)).batches

    def list_rollouts(self, batch_id: str, *, state: str | None = None, trajectory: bool = False) -> list[RolloutView]:
        found: list[RolloutView] = []
        while True:
            page = self.send(Requests.rollouts_page(batch_id, state, found[-1].position if found else -1,
                                                    trajectory)).rollouts
            found += page
            if len(page) < PAGE:
                return found

    def get_rollout(self, rollout_id: str, *, trajectory: bool = True) -> RolloutView:
        return self.send(Requests.get_rollout(rollout_id, trajectory))

    def results(self, batch_id: str, *, after: int = 0, trajectory: bool = True) -> Iterator[Outcome]:
        """Each finished attempt after event ``after``, as it finishes, until the batch has nothing queued or
        running; a dropped connection is resumed where it stopped."""
        failures = 0
        while True:
            try:
                with self._http.stream("GET", f"/v1/batches/{batch_id}/results",
                                       params={"trajectory": str(trajectory).lower()},
                                       headers={"Last-Event-ID": str(after)}) as response:
                    if response.status_code >= 400:
                        response.read()
                        parsed(response, Outcome)
                    parser = EventParser()
                    for line in response.iter_lines():
                        if (event := parser.feed(line)) is None:
                            continue
                        if event[0] == "end":
                            return
                        if event[0] == "outcome":
                            outcome = Outcome.model_validate_json(event[1])
                            after, failures = outcome.event_id, 0
                            yield outcome
            except httpx.TransportError:
                failures += 1
                if failures > RECONNECTS:
                    raise
                time.sleep(min(0.2 * 2 ** failures, 5.0))

    def cancel_batch(self, batch_id: str) -> BatchView:
        return self.send(Requests.action("batches", batch_id, "cancel"))

    def cancel_rollout(self, rollout_id: str) -> RolloutView:
        return self.send(Requests.action("rollouts", rollout_id, "cancel"))

    def retry_rollout(self, rollout_id: str) -> RolloutView:
        return self.send(Requests.action("rollouts", rollout_id, "retry"))

    def retry_batch(self, batch_id: str, *, error_classes: tuple[str, ...] = ("infra",)) -> RetryResult:
        return self.send(Requests.action("batches", batch_id, "retry", {"error_classes": list(error_classes)}))

    def pause(self, batch_id: str, model_calls: str = "drain") -> BatchView:
        """Start no more trials; ``model_calls`` ``finish`` or ``continue`` also holds the running trials' model
        calls for a weight update (see ``PauseRequest``)."""
        return self.send(Requests.action("batches", batch_id, "pause", {"model_calls": model_calls}))

    def resume(self, batch_id: str, policy_version: int | None = None) -> BatchView:
        body = {"policy_version": policy_version} if policy_version is not None else {}
        return self.send(Requests.action("batches", batch_id, "resume", body))

    def sql(self, query: str, *, max_rows: int = 1000, timeout_sec: float = 5.0) -> SqlResult:
        return self.send(Requests.sql(query, max_rows, timeout_sec))


class AsyncServeClient:
    """The same methods as :class:`ServeClient`, awaited; :meth:`results` is an async iterator."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 60.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._http = httpx.AsyncClient(base_url=base_url.rstrip("/"), timeout=timeout, transport=transport,
                                       headers={"Authorization": f"Bearer {token}"})

    @property
    def base_url(self) -> str:
        return str(self._http.base_url)

    async def __aenter__(self) -> AsyncServeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def send(self, r: Request) -> Any:
        response = await self._http.request(r.method, r.path, json=r.json, params=r.params or None,
                                            headers=r.headers)
        return parsed(response, r.model)

    async def create_batch(self, config: RunConfig | dict[str, Any], *, samples: int = 1,
                           policy_version: int | None = None, metadata: dict[str, str] | None = None,
                           idempotency_key: str | None = None) -> BatchView:
        return await self.send(Requests.create_batch(config, samples, policy_version, metadata, idempotency_key))

    async def health(self) -> Health:
        return await self.send(Requests.health())

    async def get_batch(self, batch_id: str) -> BatchView:
        return await self.send(Requests.get_batch(batch_id))

    async def list_batches(self, *, state: str | None = None, limit: int = 100,
                           before: int | None = None) -> list[BatchView]:
        return (await self.send(Requests.list_batches(state, limit, before))).batches

    async def list_rollouts(self, batch_id: str, *, state: str | None = None,
                            trajectory: bool = False) -> list[RolloutView]:
        found: list[RolloutView] = []
        while True:
            page = (await self.send(Requests.rollouts_page(batch_id, state, found[-1].position if found else -1,
                                                           trajectory))).rollouts
            found += page
            if len(page) < PAGE:
                return found

    async def get_rollout(self, rollout_id: str, *, trajectory: bool = True) -> RolloutView:
        return await self.send(Requests.get_rollout(rollout_id, trajectory))

    async def results(self, batch_id: str, *, after: int = 0, trajectory: bool = True) -> AsyncIterator[Outcome]:
        failures = 0
        while True:
            try:
                async with self._http.stream("GET", f"/v1/batches/{batch_id}/results",
                                             params={"trajectory": str(trajectory).lower()},
                                             headers={"Last-Event-ID": str(after)}) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        parsed(response, Outcome)
                    parser = EventParser()
                    async for line in response.aiter_lines():
                        if (event := parser.feed(line)) is None:
                            continue
                        if event[0] == "end":
                            return
                        if event[0] == "outcome":
                            outcome = Outcome.model_validate_json(event[1])
                            after, failures = outcome.event_id, 0
                            yield outcome
            except httpx.TransportError:
                failures += 1
                if failures > RECONNECTS:
                    raise
                await asyncio.sleep(min(0.2 * 2 ** failures, 5.0))

    async def cancel_batch(self, batch_id: str) -> BatchView:
        return await self.send(Requests.action("batches", batch_id, "cancel"))

    async def cancel_rollout(self, rollout_id: str) -> RolloutView:
        return await self.send(Requests.action("rollouts", rollout_id, "cancel"))

    async def retry_rollout(self, rollout_id: str) -> RolloutView:
        return await self.send(Requests.action("rollouts", rollout_id, "retry"))

    async def retry_batch(self, batch_id: str, *, error_classes: tuple[str, ...] = ("infra",)) -> RetryResult:
        return await self.send(Requests.action("batches", batch_id, "retry", {"error_classes": list(error_classes)}))

    async def pause(self, batch_id: str, model_calls: str = "drain") -> BatchView:
        """Start no more trials; ``model_calls`` ``finish`` or ``continue`` also holds the running trials' model
        calls for a weight update (see ``PauseRequest``)."""
        return await self.send(Requests.action("batches", batch_id, "pause", {"model_calls": model_calls}))

    async def resume(self, batch_id: str, policy_version: int | None = None) -> BatchView:
        body = {"policy_version": policy_version} if policy_version is not None else {}
        return await self.send(Requests.action("batches", batch_id, "resume", body))

    async def sql(self, query: str, *, max_rows: int = 1000, timeout_sec: float = 5.0) -> SqlResult:
        return await self.send(Requests.sql(query, max_rows, timeout_sec))
