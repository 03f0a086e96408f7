"""Read-only SQL over the tables: a SELECT answers with its rows (capped, timed); anything that writes, or a second
statement, is 400 and writes nothing."""

from __future__ import annotations

import pytest
from serve_testing import row_counts, run_config, served

from tackroom_serve import ServeError

WRITES = [
    "DELETE FROM results",
    "DELETE FROM rollouts",
    "UPDATE batches SET state = 'cancelled'",
    "INSERT INTO meta (key, value) VALUES ('x', 'y')",
    "DROP TABLE results",
    "CREATE TABLE evil (x int)",
    "SELECT 1; DELETE FROM results",
    "ATTACH DATABASE '/tmp/tackroom-serve-attached.db' AS other",
    "PRAGMA query_only = OFF",
    "PRAGMA journal_mode = DELETE",
    "WITH gone AS (DELETE FROM rollouts RETURNING id) SELECT count(*) FROM gone",
]


async def test_select_answers_rows_capped_and_writes_are_refused(tmp_path, manager, tasks):
    async with served(tmp_path / "svc", manager) as (service, client):
        batch = await client.create_batch(run_config(tasks, harness={"name": "oracle"}), samples=2)
        [o async for o in client.results(batch.id, trajectory=False)]
        found = await client.sql("SELECT task_id, sample, state FROM rollouts ORDER BY position")
        assert found.columns == ["task_id", "sample", "state"] and not found.truncated
        assert [r[0] for r in found.rows] == ["alpha", "alpha", "beta", "beta", "gamma", "gamma"]
        described = await client.sql("PRAGMA table_info(rollouts)")
        assert "trial_id" in [r[1] for r in described.rows]
        capped = await client.sql("SELECT id FROM rollouts", max_rows=4)
        assert len(capped.rows) == 4 and capped.truncated
        joined = await client.sql("SELECT r.state, avg(x.reward) FROM rollouts r JOIN results x "
                                  "ON x.id = r.result_id GROUP BY r.state")
        assert joined.rows == [["completed", 1.0]]
        before = row_counts(service.engine)
        for statement in WRITES:
            with pytest.raises(ServeError) as refused:
                await client.sql(statement)
            assert refused.value.status == 400, statement
            assert refused.value.code in ("read_only", "sql_error"), (statement, refused.value)
        assert row_counts(service.engine) == before
        assert not (tmp_path / "tackroom-serve-attached.db").exists()
        with pytest.raises(ServeError) as refused:
            await client.sql("DELETE FROM rollouts")
        assert refused.value.code == "read_only"


async def test_a_query_past_its_deadline_is_stopped(tmp_path, manager):
    async with served(tmp_path / "svc", manager) as (_, client):
        endless = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT count(*) FROM n"
        with pytest.raises(ServeError) as refused:
            await client.sql(endless, timeout_sec=0.5)
        assert refused.value.status == 400 and refused.value.code == "timeout"
        assert (await client.sql("SELECT 1 AS one")).rows == [[1]]  # the connection is usable after
