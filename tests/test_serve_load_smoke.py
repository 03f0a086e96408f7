"""benchmarks/serve_load.py at small N: the same code path as the 10,000-rollout run (the stub plugins registered in
the service's own process, batches submitted and streamed back over HTTP, the service's memory sampled), so a change
to the service or its client that breaks the benchmark fails here rather than at the next measurement."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "serve_load.py"


@pytest.mark.slow
def test_sixty_stub_rollouts_in_three_batches_all_come_back_with_latency_throughput_and_memory(tmp_path: Path) -> None:
    out = tmp_path / "row.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "-n", "60", "--batch-size", "20", "--tasks", "4",
                           "--concurrency", "8", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    row = json.loads(out.read_text())
    assert (row["rollouts"], row["batches"], row["per_batch"]) == (60, 3, 20)
    assert row["states"] == {"completed": 60}
    assert 0 < row["submit_p50_ms"] <= row["submit_p99_ms"] and row["results_per_s"] > 0
    assert row["rss_peak_mb"] > 20 and row["db"] == "sqlite"
    assert "submit latency   p50" in done.stdout and "service RSS" in done.stdout
