"""What the service writes: batches and their rollouts, claims, finished attempts, cancels, retries, restarts.

One lock serialises the service's write transactions (a process holds the database alone), so the results table's
ids are committed in the order they are drawn: a stream reading "events after N" never skips one that commits late.
A finished attempt is recorded only while its rollout is still running that attempt (a cancel or a restart that
settled it first wins).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tackroom_serve.db.schema import batches, results, rollouts

INSERT_CHUNK = 1000


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class Conflict(Exception):
    """The request cannot apply in the current state (HTTP 409)."""


@dataclass
class NewRollout:
    task_id: str
    task_path: str
    task_hash: str
    trial_id: str
    sample: int


@dataclass
class NewBatch:
    id: str
    client: str
    idempotency_key: str | None
    request_hash: str
    policy_version: int | None
    samples: int
    concurrency: int
    config: dict[str, Any]
    secrets_in_memory: bool
    metadata: dict[str, str]
    task_load_failures: list[dict[str, str]] = field(default_factory=list)
    rollouts: list[NewRollout] = field(default_factory=list)


@dataclass
class Finished:
    """One attempt's end, as a results row."""

    state: str
    reward: float | None = None
    error_class: str | None = None
    error: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    result: dict[str, Any] = field(default_factory=dict)
    trajectory: dict[str, Any] = field(default_factory=dict)


@dataclass
class Claimed:
    """A rollout the dispatcher started: what its trial needs."""

    id: str
    batch_id: str
    task_id: str
    task_path: str
    task_hash: str
    trial_id: str
    sample: int
    attempt: int
    policy_version: int | None


class Store:
    """The service's writes; each method is one transaction under the write lock."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = threading.Lock()

    @contextmanager
    def writing(self) -> Iterator[sa.Connection]:
        with self._lock, self.engine.begin() as conn:
            yield conn

    # -- batches ------------------------------------------------------------------------------------
    def create_batch(self, new: NewBatch) -> str | None:
        """Write the batch and its rollouts; ``None`` (nothing written) when the client already has a batch under
        this idempotency key (a request that raced this one)."""
        with self.writing() as conn:
            if new.idempotency_key is not None and conn.execute(sa.select(batches.c.id).where(
                    batches.c.client == new.client, batches.c.idempotency_key == new.idempotency_key)).first():
                return None
            stamp = now()
            conn.execute(batches.insert().values(
                id=new.id, client=new.client, idempotency_key=new.idempotency_key, request_hash=new.request_hash,
                state="active", policy_version=new.policy_version, samples=new.samples, total=len(new.rollouts),
                concurrency=new.concurrency, config=new.config, secrets_in_memory=new.secrets_in_memory,
                task_load_failures=new.task_load_failures, metadata=new.metadata, created_at=stamp,
                updated_at=stamp))
            rows = [{"id": f"{new.id}-{i:05d}", "batch_id": new.id, "position": i, "task_id": r.task_id,
                     "task_path": r.task_path, "task_hash": r.task_hash, "trial_id": r.trial_id, "sample": r.sample,
                     "state": "queued", "attempt": 1, "created_at": stamp} for i, r in enumerate(new.rollouts)]
            for start in range(0, len(rows), INSERT_CHUNK):
                conn.execute(rollouts.insert(), rows[start:start + INSERT_CHUNK])
            return new.id

    def batch_state(self, batch_id: str, state: str, *, policy_version: Any = ...) -> None:
        """Pause (``paused``) or resume (``active``, optionally with a new policy version) a batch."""
        with self.writing() as conn:
            current = conn.execute(sa.select(batches.c.state).where(batches.c.id == batch_id)).scalar()
            if current == "cancelled":
                raise Conflict(f"batch {batch_id} is cancelled; create a new batch (or retry its rollouts)")
            values: dict[str, Any] = {"state": state, "updated_at": now()}
            if policy_version is not ...:
                values["policy_version"] = policy_version
            conn.execute(batches.update().where(batches.c.id == batch_id).values(**values))

    def cancel_batch(self, batch_id: str, note: str) -> list[str]:
        """Mark the batch cancelled and settle its queued rollouts; returns the running ones' ids (to stop)."""
        with self.writing() as conn:
            conn.execute(batches.update().where(batches.c.id == batch_id).values(state="cancelled",
                                                                                 updated_at=now()))
            self._settle(conn, self._ids(conn, batch_id, "queued"), Finished("cancelled", notes=[note]))
            return self._ids(conn, batch_id, "running")

    def _ids(self, conn: sa.Connection, batch_id: str, state: str) -> list[str]:
        query = sa.select(rollouts.c.id).where(rollouts.c.batch_id == batch_id, rollouts.c.state == state)
        return list(conn.execute(query).scalars())

    # -- rollouts -----------------------------------------------------------------------------------
    def runnable(self) -> list[tuple[str, int]]:
        """Active batches with queued rollouts, oldest first: (id, concurrency)."""
        queued = sa.exists().where(rollouts.c.batch_id == batches.c.id, rollouts.c.state == "queued")
        query = (sa.select(batches.c.id, batches.c.concurrency).where(batches.c.state == "active", queued)
                 .order_by(batches.c.seq))
        with self.engine.connect() as conn:
            return [(r[0], r[1]) for r in conn.execute(query)]

    def claim(self, batch_id: str, limit: int) -> list[Claimed]:
        """Mark up to ``limit`` of an active batch's queued rollouts running, in batch order, with the batch's
        current policy version."""
        with self.writing() as conn:
            batch = conn.execute(sa.select(batches.c.state, batches.c.policy_version)
                                 .where(batches.c.id == batch_id)).first()
            if batch is None or batch.state != "active":
                return []
            query = (sa.select(rollouts).where(rollouts.c.batch_id == batch_id, rollouts.c.state == "queued")
                     .order_by(rollouts.c.position).limit(limit))
            rows = conn.execute(query).mappings().all()
            if rows:
                conn.execute(rollouts.update().where(rollouts.c.id.in_([r["id"] for r in rows]))
                             .values(state="running", started_at=now(), policy_version=batch.policy_version))
            return [Claimed(id=r["id"], batch_id=batch_id, task_id=r["task_id"], task_path=r["task_path"],
                            task_hash=r["task_hash"], trial_id=r["trial_id"], sample=r["sample"],
                            attempt=r["attempt"], policy_version=batch.policy_version) for r in rows]

    def finish(self, claimed: Claimed, finished: Finished) -> int | None:
        """Record the end of ``claimed``'s attempt; its event id, or ``None`` when something settled it first."""
        with self.writing() as conn:
            ended = conn.execute(rollouts.update().where(
                rollouts.c.id == claimed.id, rollouts.c.state == "running", rollouts.c.attempt == claimed.attempt)
                .values(state=finished.state))
            if ended.rowcount != 1:
                return None
            event = self._record(conn, claimed.id, claimed.batch_id, claimed.attempt, claimed.policy_version,
                                 finished)
            conn.execute(rollouts.update().where(rollouts.c.id == claimed.id).values(result_id=event))
            return event

    def _record(self, conn: sa.Connection, rollout_id: str, batch_id: str, attempt: int,
                policy_version: int | None, f: Finished) -> int:
        inserted = conn.execute(results.insert().values(
            rollout_id=rollout_id, batch_id=batch_id, attempt=attempt, state=f.state, policy_version=policy_version,
            reward=f.reward, error_class=f.error_class, error=f.error, notes=f.notes, result=f.result,
            trajectory=f.trajectory, finished_at=now()))
        return int(inserted.inserted_primary_key[0])

    def _settle(self, conn: sa.Connection, ids: list[str], finished: Finished) -> None:
        """End the current attempt of each rollout in ``ids`` with ``finished`` (a result row each)."""
        if not ids:
            return
        for start in range(0, len(ids), INSERT_CHUNK):
            chunk = ids[start:start + INSERT_CHUNK]
            rows = conn.execute(sa.select(rollouts.c.id, rollouts.c.batch_id, rollouts.c.attempt,
                                          rollouts.c.policy_version).where(rollouts.c.id.in_(chunk))).all()
            for r in rows:
                event = self._record(conn, r.id, r.batch_id, r.attempt, r.policy_version, finished)
                conn.execute(rollouts.update().where(rollouts.c.id == r.id)
                             .values(state=finished.state, result_id=event))

    def cancel_queued(self, rollout_id: str, note: str) -> str | None:
        """Cancel a queued rollout; returns the rollout's state before (None: no such rollout)."""
        with self.writing() as conn:
            state = conn.execute(sa.select(rollouts.c.state).where(rollouts.c.id == rollout_id)).scalar()
            if state == "queued":
                self._settle(conn, [rollout_id], Finished("cancelled", notes=[note]))
            return state

    def retry(self, batch_id: str, rollout_ids: list[str] | None = None,
              error_classes: list[str] | None = None) -> list[str]:
        """Queue again, each as a new attempt, the named finished rollouts, or the batch's whose last outcome has
        one of ``error_classes``; refused for a cancelled batch or a rollout still queued or running."""
        with self.writing() as conn:
            state = conn.execute(sa.select(batches.c.state).where(batches.c.id == batch_id)).scalar()
            if state == "cancelled":
                raise Conflict(f"batch {batch_id} is cancelled: its rollouts are not run again")
            query = (sa.select(rollouts.c.id, rollouts.c.state)
                     .select_from(rollouts.outerjoin(results, results.c.id == rollouts.c.result_id))
                     .where(rollouts.c.batch_id == batch_id))
            if rollout_ids is not None:
                found = conn.execute(query.where(rollouts.c.id.in_(rollout_ids))).all()
                busy = [r.id for r in found if r.state in ("queued", "running")]
                if busy:
                    raise Conflict(f"rollout {busy[0]} is {dict(found)[busy[0]]}: only a finished one is retried")
            else:
                found = conn.execute(query.where(rollouts.c.state.in_(("completed", "failed", "interrupted")),
                                                 results.c.error_class.in_(error_classes or ["infra"]))).all()
            ids = [r.id for r in found]
            if ids:
                for start in range(0, len(ids), INSERT_CHUNK):
                    conn.execute(rollouts.update().where(rollouts.c.id.in_(ids[start:start + INSERT_CHUNK]))
                                 .values(state="queued", attempt=rollouts.c.attempt + 1, started_at=None,
                                         policy_version=None))
                conn.execute(batches.update().where(batches.c.id == batch_id).values(updated_at=now()))
            return ids

    def recover(self, requeue: bool) -> list[str]:
        """At start: every rollout left running by the last process ends its attempt as ``interrupted``
        (an ``infra`` error); with ``requeue`` it is queued again as a new attempt. Returns their ids."""
        interrupted = Finished("interrupted", error_class="infra", error={
            "class": "infra", "type": "ServiceInterrupted", "phase": "service",
            "message": "the service stopped while this attempt ran (killed, crashed or shut down)"})
        with self.writing() as conn:
            ids = list(conn.execute(sa.select(rollouts.c.id).where(rollouts.c.state == "running")).scalars())
            self._settle(conn, ids, interrupted)
            if requeue and ids:
                for start in range(0, len(ids), INSERT_CHUNK):
                    conn.execute(rollouts.update().where(rollouts.c.id.in_(ids[start:start + INSERT_CHUNK]))
                                 .values(state="queued", attempt=rollouts.c.attempt + 1, started_at=None,
                                         policy_version=None))
            return ids

    def fail_queued(self, batch_id: str, finished: Finished) -> int:
        """End every queued rollout of a batch that cannot run (its plugins failed to build)."""
        with self.writing() as conn:
            ids = self._ids(conn, batch_id, "queued")
            self._settle(conn, ids, finished)
            return len(ids)
