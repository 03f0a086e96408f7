"""PostgreSQL through the same code: the same batch gives the same rows as on SQLite, and read-only SQL holds there
too (a throwaway cluster started from Debian's binaries; skipped, saying why, where they are absent)."""

from __future__ import annotations

import pytest
from serve_testing import row_counts, run_config, served

from tackroom_serve import ServeError

pytestmark = pytest.mark.slow

WRITES = [
    "DELETE FROM results",
    "DELETE FROM rollouts",
    "UPDATE batches SET state = 'cancelled'",
    "DROP TABLE results",
    "SELECT 1; DELETE FROM results",
    "WITH gone AS (DELETE FROM results RETURNING id) SELECT count(*) FROM gone",
    "SET default_transaction_read_only = off; DELETE FROM results",
    # each a way out of a read-only transaction, were a second statement run
    "SELECT 1; COMMIT; BEGIN READ WRITE; DELETE FROM results; COMMIT",
    "SELECT 1; COMMIT; SET default_transaction_read_only = off; COMMIT; DELETE FROM results",
]


async def _run_batches(folder, manager, tasks, db: str | None) -> dict:
    async with served(folder, manager, db=db) as (service, client):
        assert service.engine.dialect.name == ("postgresql" if db else "sqlite")
        oracle = await client.create_batch(run_config(tasks, harness={"name": "oracle"}), samples=2,
                                           policy_version=3, idempotency_key="same")
        nop = await client.create_batch(run_config(tasks, harness={"name": "nop"}))
        streamed = {b.id: [o async for o in client.results(b.id)] for b in (oracle, nop)}
        again = await client.create_batch(run_config(tasks, harness={"name": "oracle"}), samples=2,
                                          policy_version=3, idempotency_key="same")
        assert again.id == oracle.id
        rows = {}
        for batch in (oracle, nop):
            rows[batch.id] = [(r.position, r.task_id, r.sample, r.trial_id, r.state, r.attempt, r.policy_version,
                               r.outcome.state, r.outcome.reward, r.outcome.error_class, r.outcome.notes)
                              for r in await client.list_rollouts(batch.id)]
        sql = await client.sql("SELECT r.task_id, r.sample, r.state, x.reward, x.policy_version FROM rollouts r "
                               "JOIN results x ON x.id = r.result_id ORDER BY r.trial_id")
        return {
            "rollouts": [rows[oracle.id], rows[nop.id]],
            "outcomes": [sorted((o.trial_id, o.state, o.reward, o.attempt, o.trajectory.stop_reason)
                                for o in streamed[b.id]) for b in (oracle, nop)],
            "counts": [(await client.get_batch(b.id)).counts for b in (oracle, nop)],
            "sql": sql.rows,
            "tables": row_counts(service.engine),
        }


async def test_the_same_batch_gives_the_same_rows_on_postgresql_as_on_sqlite(tmp_path, manager, tasks, postgres_db):
    on_sqlite = await _run_batches(tmp_path / "sqlite", manager, tasks, None)
    on_postgres = await _run_batches(tmp_path / "postgres", manager, tasks, postgres_db)
    assert on_postgres == on_sqlite
    assert on_sqlite["tables"] == {"batches": 2, "rollouts": 9, "results": 9}


async def test_read_only_sql_on_postgresql_refuses_writes_and_second_statements(tmp_path, manager, tasks,
                                                                               postgres_db):
    async with served(tmp_path / "svc", manager, db=postgres_db) as (service, client):
        batch = await client.create_batch(run_config(tasks, harness={"name": "nop"}))
        [o async for o in client.results(batch.id, trajectory=False)]
        before = row_counts(service.engine)
        for statement in WRITES:
            with pytest.raises(ServeError) as refused:
                await client.sql(statement)
            assert refused.value.status == 400 and refused.value.code in ("read_only", "sql_error"), statement
        assert row_counts(service.engine) == before
        with pytest.raises(ServeError) as refused:
            await client.sql("DELETE FROM rollouts")
        assert refused.value.code == "read_only"
        with pytest.raises(ServeError) as refused:
            await client.sql("SELECT pg_sleep(30)", timeout_sec=0.5)
        assert refused.value.code == "timeout"
        found = await client.sql("SELECT state, count(*) FROM rollouts GROUP BY state")
        assert found.rows == [["completed", 3]]
        capped = await client.sql("SELECT generate_series(1, 50)", max_rows=10)
        assert len(capped.rows) == 10 and capped.truncated
