"""What the routes and the results stream read: batches with their counts, rollouts with their latest outcome, the
outcomes after an event id. Every read is one short transaction; nothing here writes."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine, RowMapping

from tackroom_serve.db.schema import batches, results, rollouts
from tackroom_serve.models import ROLLOUT_STATES, BatchView, Outcome, RolloutView, TaskLoadProblem

OUTCOME_COLUMNS = [c.label(f"r_{c.name}") for c in results.c if c.name != "trajectory"]
TRAJECTORY = results.c.trajectory.label("r_trajectory")


def outcome_of(row: RowMapping, *, trajectory: bool) -> Outcome | None:
    """The ``r_``-prefixed result columns of a joined row as an :class:`Outcome` (None where there is none)."""
    if row["r_id"] is None:
        return None
    return Outcome(
        event_id=row["r_id"], rollout_id=row["r_rollout_id"], batch_id=row["r_batch_id"], task_id=row["task_id"],
        sample=row["sample"], trial_id=row["trial_id"], attempt=row["r_attempt"], state=row["r_state"],
        policy_version=row["r_policy_version"], reward=row["r_reward"], error_class=row["r_error_class"],
        error=row["r_error"], notes=row["r_notes"] or [], result=row["r_result"] or {},
        trajectory=row["r_trajectory"] if trajectory else None, finished_at=row["r_finished_at"])


def rollout_view(row: RowMapping, *, trajectory: bool) -> RolloutView:
    return RolloutView(
        id=row["id"], batch_id=row["batch_id"], position=row["position"], task_id=row["task_id"],
        task_path=row["task_path"], trial_id=row["trial_id"], sample=row["sample"], state=row["state"],
        attempt=row["attempt"], policy_version=row["policy_version"], created_at=row["created_at"],
        started_at=row["started_at"], outcome=outcome_of(row, trajectory=trajectory))


def batch_view(row: RowMapping, counts: dict[str, int]) -> BatchView:
    full = {state: counts.get(state, 0) for state in ROLLOUT_STATES}
    return BatchView(
        id=row["id"], seq=row["seq"], client=row["client"], state=row["state"],
        done=full["queued"] + full["running"] == 0, policy_version=row["policy_version"], samples=row["samples"],
        total=row["total"], counts=full, concurrency=row["concurrency"], idempotency_key=row["idempotency_key"],
        metadata=row["metadata"] or {}, config=row["config"],
        task_load_failures=[TaskLoadProblem(**f) for f in row["task_load_failures"] or []],
        created_at=row["created_at"], updated_at=row["updated_at"])


class Reader:
    """Reads for the API; each method opens its own connection."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def counts(self, conn: sa.Connection, batch_ids: list[str]) -> dict[str, dict[str, int]]:
        found: dict[str, dict[str, int]] = {b: {} for b in batch_ids}
        query = (sa.select(rollouts.c.batch_id, rollouts.c.state, sa.func.count())
                 .where(rollouts.c.batch_id.in_(batch_ids)).group_by(rollouts.c.batch_id, rollouts.c.state))
        for batch_id, state, n in conn.execute(query):
            found[batch_id][state] = n
        return found

    def batch(self, batch_id: str) -> BatchView | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(batches).where(batches.c.id == batch_id)).mappings().first()
            return None if row is None else batch_view(row, self.counts(conn, [batch_id])[batch_id])

    def keyed_batch(self, client: str, key: str) -> tuple[BatchView, str] | None:
        """The batch ``client`` created with idempotency key ``key``, and its request's hash."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(batches).where(batches.c.client == client,
                                                        batches.c.idempotency_key == key)).mappings().first()
            if row is None:
                return None
            return batch_view(row, self.counts(conn, [row["id"]])[row["id"]]), row["request_hash"]

    def batches(self, *, state: str | None, limit: int, before: int | None) -> list[BatchView]:
        query = sa.select(batches).order_by(batches.c.seq.desc()).limit(limit)
        if state is not None:
            query = query.where(batches.c.state == state)
        if before is not None:
            query = query.where(batches.c.seq < before)
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
            counts = self.counts(conn, [r["id"] for r in rows])
            return [batch_view(r, counts[r["id"]]) for r in rows]

    def _rollout_query(self, trajectory: bool) -> sa.Select:
        columns: list[Any] = [*rollouts.c, *OUTCOME_COLUMNS, *([TRAJECTORY] if trajectory else [])]
        return sa.select(*columns).select_from(rollouts.outerjoin(results, results.c.id == rollouts.c.result_id))

    def rollouts(self, batch_id: str, *, state: str | None, limit: int, after: int,
                 trajectory: bool) -> list[RolloutView]:
        query = (self._rollout_query(trajectory).where(rollouts.c.batch_id == batch_id, rollouts.c.position > after)
                 .order_by(rollouts.c.position).limit(limit))
        if state is not None:
            query = query.where(rollouts.c.state == state)
        with self.engine.connect() as conn:
            return [rollout_view(r, trajectory=trajectory) for r in conn.execute(query).mappings()]

    def rollout(self, rollout_id: str, *, trajectory: bool) -> RolloutView | None:
        with self.engine.connect() as conn:
            row = conn.execute(self._rollout_query(trajectory).where(rollouts.c.id == rollout_id)).mappings().first()
            return None if row is None else rollout_view(row, trajectory=trajectory)

    def outcomes_after(self, batch_id: str, after: int, *, limit: int = 100, trajectory: bool = True) -> list[Outcome]:
        """The batch's finished attempts with an event id above ``after``, oldest first."""
        columns = [rollouts.c.task_id, rollouts.c.sample, rollouts.c.trial_id, *OUTCOME_COLUMNS,
                   *([TRAJECTORY] if trajectory else [])]
        query = (sa.select(*columns).select_from(results.join(rollouts, rollouts.c.id == results.c.rollout_id))
                 .where(results.c.batch_id == batch_id, results.c.id > after).order_by(results.c.id).limit(limit))
        with self.engine.connect() as conn:
            found = [outcome_of(r, trajectory=trajectory) for r in conn.execute(query).mappings()]
        return [o for o in found if o is not None]

    def batch_config(self, batch_id: str) -> tuple[dict[str, Any], bool]:
        """The batch's config as written, and whether it held credentials (kept in memory only)."""
        query = sa.select(batches.c.config, batches.c.secrets_in_memory).where(batches.c.id == batch_id)
        with self.engine.connect() as conn:
            row = conn.execute(query).one()
            return row.config, bool(row.secrets_in_memory)

    def unsettled(self, batch_id: str) -> int:
        """How many of the batch's rollouts are queued or running."""
        query = sa.select(sa.func.count()).where(rollouts.c.batch_id == batch_id,
                                                 rollouts.c.state.in_(("queued", "running")))
        with self.engine.connect() as conn:
            return conn.execute(query).scalar_one()
