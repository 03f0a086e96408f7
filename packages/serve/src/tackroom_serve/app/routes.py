"""The route table: each operation's method, path, models and handler (:class:`Operation`), and the handlers,
given the service's parts explicitly (:class:`Parts`). ``app.server`` wraps each with the token check, the body's
size limit and validation; ``app.openapi`` describes the same table."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from sqlalchemy.engine import Engine
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from tackroom_app import PluginManager
from tackroom_serve.app.http import ApiError, answer
from tackroom_serve.db.readonly import run_readonly
from tackroom_serve.db.reads import Reader
from tackroom_serve.models import (
    BatchCreate,
    BatchList,
    BatchQuery,
    BatchView,
    Health,
    NoBody,
    PauseRequest,
    ResultsQuery,
    ResumeRequest,
    RetryBatchRequest,
    RetryResult,
    RolloutGetQuery,
    RolloutList,
    RolloutQuery,
    RolloutView,
    SqlRequest,
    SqlResult,
)
from tackroom_serve.plan import plan_batch, request_hash
from tackroom_serve.queue.worker import Dispatcher

KEEPALIVE_SEC = 15.0
EVENTS_PAGE = 100
MAX_KEY_CHARS = 256


@dataclass
class Call:
    """One request, checked: who sent it, its validated body and query."""

    request: Request
    client: str
    body: Any = None
    raw: Any = None
    query: Any = None

    def param(self, name: str) -> str:
        return self.request.path_params[name]


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    handler: Callable[[Call], Awaitable[Response]]
    summary: str
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    response: type[BaseModel] | None = None
    status: int = 200
    auth: bool = True
    stream: bool = False


@dataclass
class Parts:
    """What the handlers use."""

    reader: Reader
    dispatcher: Dispatcher
    readonly: Engine
    tasks_root: Path
    cancel_wait_sec: float = 10.0
    manager: PluginManager | None = None
    version: str = ""


class ServeRoutes:
    """The handlers; :meth:`operations` is the route table."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.reader = parts.reader
        self.dispatcher = parts.dispatcher

    def operations(self) -> list[Operation]:
        B, R = "/v1/batches/{batch_id}", "/v1/rollouts/{rollout_id}"
        return [
            Operation("GET", "/v1/health", self.health, "Liveness and the database's dialect", response=Health,
                      auth=False),
            Operation("POST", "/v1/batches", self.create_batch, "Create a batch of rollouts (tasks × samples of one "
                      "run config); an Idempotency-Key header makes a repeat return the same batch",
                      body=BatchCreate, response=BatchView, status=201),
            Operation("GET", "/v1/batches", self.list_batches, "List batches, newest first", query=BatchQuery,
                      response=BatchList),
            Operation("GET", B, self.get_batch, "A batch, its rollouts counted by state", response=BatchView),
            Operation("GET", f"{B}/rollouts", self.list_rollouts, "A batch's rollouts in order",
                      query=RolloutQuery, response=RolloutList),
            Operation("GET", f"{B}/results", self.results, "Server-sent events: each finished attempt as it "
                      "finishes (`outcome`, its id the event id; resume with Last-Event-ID), then `end`",
                      query=ResultsQuery, stream=True),
            Operation("POST", f"{B}/cancel", self.cancel_batch, "Cancel a batch: queued rollouts at once, running "
                      "ones stopped", body=NoBody, response=BatchView),
            Operation("POST", f"{B}/pause", self.pause, "Start no more trials; running ones drain, or (model_calls "
                      "finish/continue, for a weight update) their model calls are held until the resume",
                      body=PauseRequest, response=BatchView),
            Operation("POST", f"{B}/resume", self.resume, "Start trials again, with a new policy_version",
                      body=ResumeRequest, response=BatchView),
            Operation("POST", f"{B}/retry", self.retry_batch, "Queue again every finished rollout whose error has "
                      "one of these classes", body=RetryBatchRequest, response=RetryResult),
            Operation("GET", R, self.get_rollout, "A rollout and its latest outcome", query=RolloutGetQuery,
                      response=RolloutView),
            Operation("POST", f"{R}/cancel", self.cancel_rollout, "Cancel a queued or running rollout",
                      body=NoBody, response=RolloutView),
            Operation("POST", f"{R}/retry", self.retry_rollout, "Queue a finished rollout again as a new attempt",
                      body=NoBody, response=RolloutView),
            Operation("POST", "/v1/sql", self.sql, "One SELECT over the tables, read-only, capped and timed",
                      body=SqlRequest, response=SqlResult),
        ]

    # -- helpers ---------------------------------------------------------------------------------------
    async def batch(self, batch_id: str) -> BatchView:
        found = await asyncio.to_thread(self.reader.batch, batch_id)
        if found is None:
            raise ApiError(404, "batch_not_found", f"no batch {batch_id!r} (GET /v1/batches lists them)")
        return found

    async def rollout(self, rollout_id: str, *, trajectory: bool = True) -> RolloutView:
        found = await asyncio.to_thread(self.reader.rollout, rollout_id, trajectory=trajectory)
        if found is None:
            raise ApiError(404, "rollout_not_found", f"no rollout {rollout_id!r} (GET /v1/batches/{{id}}/rollouts "
                           "lists a batch's)")
        return found

    # -- batches -------------------------------------------------------------------------------------
    async def health(self, call: Call) -> Response:
        return answer(Health(status="ok", version=self.parts.version, running=len(self.dispatcher.running),
                             database=self.reader.engine.dialect.name))

    async def create_batch(self, call: Call) -> Response:
        key = call.request.headers.get("idempotency-key")
        if key is not None and not (0 < len(key) <= MAX_KEY_CHARS and key.isprintable()):
            raise ApiError(400, "bad_idempotency_key", f"Idempotency-Key: 1 to {MAX_KEY_CHARS} printable characters")
        digest = request_hash(call.raw)
        if key is not None and (repeat := await self._repeat(call.client, key, digest)) is not None:
            return repeat
        new, config = await asyncio.to_thread(plan_batch, call.body, client=call.client, key=key, digest=digest,
                                              tasks_root=self.parts.tasks_root, manager=self.parts.manager)
        if new.secrets_in_memory:
            self.dispatcher.runners.configs[new.id] = config
        if await asyncio.to_thread(self.dispatcher.store.create_batch, new) is None:  # a twin request won the race
            self.dispatcher.runners.configs.pop(new.id, None)
            assert key is not None
            repeat = await self._repeat(call.client, key, digest)
            assert repeat is not None
            return repeat
        self.dispatcher.wake()
        return answer(await self.batch(new.id), 201)

    async def _repeat(self, client: str, key: str, digest: str) -> Response | None:
        found = await asyncio.to_thread(self.reader.keyed_batch, client, key)
        if found is None:
            return None
        batch, stored = found
        if stored != digest:
            raise ApiError(409, "idempotency_key_reused", f"Idempotency-Key {key!r} was used for batch {batch.id} "
                           "with a different body; use a new key for a new batch")
        return answer(batch, 200)

    async def list_batches(self, call: Call) -> Response:
        q: BatchQuery = call.query
        found = await asyncio.to_thread(self.reader.batches, state=q.state, limit=q.limit, before=q.before)
        return answer(BatchList(batches=found))

    async def get_batch(self, call: Call) -> Response:
        return answer(await self.batch(call.param("batch_id")))

    async def list_rollouts(self, call: Call) -> Response:
        q: RolloutQuery = call.query
        batch = await self.batch(call.param("batch_id"))
        found = await asyncio.to_thread(self.reader.rollouts, batch.id, state=q.state, limit=q.limit,
                                        after=q.after, trajectory=q.trajectory)
        return answer(RolloutList(rollouts=found))

    async def cancel_batch(self, call: Call) -> Response:
        batch = await self.batch(call.param("batch_id"))
        await self.dispatcher.cancel_batch(batch.id, f"cancelled by {call.client}", self.parts.cancel_wait_sec)
        return answer(await self.batch(batch.id))

    async def pause(self, call: Call) -> Response:
        batch = await self.batch(call.param("batch_id"))
        await self.dispatcher.pause(batch.id, call.body.model_calls)
        return answer(await self.batch(batch.id))

    async def resume(self, call: Call) -> Response:
        batch = await self.batch(call.param("batch_id"))
        version = call.body.policy_version if "policy_version" in call.body.model_fields_set else ...
        await self.dispatcher.resume(batch.id, version)
        return answer(await self.batch(batch.id))

    async def retry_batch(self, call: Call) -> Response:
        batch = await self.batch(call.param("batch_id"))
        ids = await self.dispatcher.under_lock(self.dispatcher.store.retry, batch.id,
                                               error_classes=list(call.body.error_classes))
        return answer(RetryResult(retried=ids, batch=await self.batch(batch.id)))

    # -- rollouts and results -----------------------------------------------------------------------
    async def get_rollout(self, call: Call) -> Response:
        return answer(await self.rollout(call.param("rollout_id"), trajectory=call.query.trajectory))

    async def cancel_rollout(self, call: Call) -> Response:
        rollout = await self.rollout(call.param("rollout_id"), trajectory=False)
        await self.dispatcher.cancel_rollout(rollout.batch_id, rollout.id, f"cancelled by {call.client}",
                                             self.parts.cancel_wait_sec)
        return answer(await self.rollout(rollout.id))

    async def retry_rollout(self, call: Call) -> Response:
        rollout = await self.rollout(call.param("rollout_id"), trajectory=False)
        await self.dispatcher.under_lock(self.dispatcher.store.retry, rollout.batch_id, rollout_ids=[rollout.id])
        return answer(await self.rollout(rollout.id))

    async def results(self, call: Call) -> Response:
        batch = await self.batch(call.param("batch_id"))
        last = call.request.headers.get("last-event-id", "")
        after = int(last) if last.strip().isdigit() else call.query.after
        return StreamingResponse(self._events(batch.id, after, call.query.trajectory), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def _events(self, batch_id: str, after: int, trajectory: bool) -> AsyncIterator[str]:
        """Every outcome after ``after`` as it is recorded; ``end`` (the batch) once none is queued or running."""
        changes = self.dispatcher.changes
        while True:
            change = changes.current(batch_id)
            found = await asyncio.to_thread(self.reader.outcomes_after, batch_id, after, limit=EVENTS_PAGE,
                                            trajectory=trajectory)
            for outcome in found:
                after = outcome.event_id
                yield f"id: {after}\nevent: outcome\ndata: {outcome.model_dump_json(by_alias=True)}\n\n"
            if len(found) == EVENTS_PAGE:
                continue
            # outcomes are written with their rollout's last state: none unsettled means none is left to come
            if not await asyncio.to_thread(self.reader.unsettled, batch_id):
                if await asyncio.to_thread(self.reader.outcomes_after, batch_id, after, limit=1, trajectory=False):
                    continue
                yield f"event: end\ndata: {(await self.batch(batch_id)).model_dump_json()}\n\n"
                return
            try:
                await asyncio.wait_for(change.wait(), KEEPALIVE_SEC)
            except TimeoutError:
                yield ": keepalive\n\n"

    async def sql(self, call: Call) -> Response:
        q: SqlRequest = call.body
        found = await asyncio.to_thread(run_readonly, self.parts.readonly, q.query, max_rows=q.max_rows,
                                        timeout_sec=q.timeout_sec)
        return answer(found)
