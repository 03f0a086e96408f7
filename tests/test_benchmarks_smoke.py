"""benchmarks/trial_overhead.py: how it reads ``ready`` from results, its stub chat engine, and a two-trial run.

The README's trial table comes from this script; the run here (oracle on the local sandbox, 2 trials, concurrency
1, prepare_ahead 0 and 1) goes through the same code path, so a runtime change that breaks the benchmark (a timing
renamed, TrialRuntime's signature) fails a test rather than the next measurement.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tackroom import TrialResult

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "trial_overhead.py"


def _module():
    if "trial_overhead" not in sys.modules:  # registered first: its dataclasses look their module up
        spec = importlib.util.spec_from_file_location("trial_overhead", SCRIPT)
        sys.modules["trial_overhead"] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules["trial_overhead"]


def _result(n: int, started: float, **timings: float) -> TrialResult:
    return TrialResult(trial_id=f"t{n}", task="t", harness="oracle", sandbox="local", verifier="test-script",
                       started_at=datetime.fromtimestamp(started, UTC).isoformat(), timings=timings)


def test_ready_without_prepare_ahead_is_the_start_and_setup_in_start_order() -> None:
    ready = _module().ready_times([
        _result(1, 100.0, harness_mounts=0.5, sandbox_start=1.0, verifier_prepare=0.25, harness_setup=2.0,
                harness_run=1.0),
        _result(0, 99.0, sandbox_start=1.0, harness_setup=1.0, harness_run=1.0),
        _result(2, 101.0, sandbox_start=1.0),  # failed before its agent: it never had a turn's agent start
    ], t0=99.0, turns=1, ahead=0)
    assert ready == [2.0, 3.75]


def test_ready_with_prepare_ahead_is_how_long_a_freed_turn_stood_idle() -> None:
    # One turn. Trial 0 prepares from 0 to 2 (the turn idle since 0), holds it 2..3 (run + kill + verify);
    # trial 1, prepared at 1.5, waits for it and starts at 3 (idle 0), gives it back at 4; trial 2 is prepared only
    # at 5 (idle 1).
    ready = _module().ready_times([
        _result(0, 0.0, sandbox_start=1.0, harness_setup=1.0, prepared_wait=0.0, harness_run=0.5, kill_agent=0.1,
                verify=0.4),
        _result(1, 0.5, sandbox_start=0.5, harness_setup=0.5, prepared_wait=1.5, harness_run=0.5, verify=0.5),
        _result(2, 4.0, sandbox_start=0.5, harness_setup=0.5, prepared_wait=0.0, harness_run=1.0),
    ], t0=0.0, turns=1, ahead=1)
    assert ready == pytest.approx([2.0, 0.0, 1.0])


def test_the_stub_chat_engine_answers_every_request_at_once_with_no_tool_call() -> None:
    engine = _module().StubChatEngine()
    try:
        models = httpx.get(f"{engine.url}/models", timeout=10).json()
        assert models["data"][0]["max_model_len"] > 0
        reply = httpx.post(f"{engine.url}/chat/completions", json={"model": "stub", "messages": []}, timeout=10).json()
        message = reply["choices"][0]["message"]
        assert message == {"role": "assistant", "content": "Done."}
        assert reply["choices"][0]["finish_reason"] == "stop"
        assert engine.requests == 1
        assert httpx.post(f"{engine.url}/completions", json={}, timeout=10).status_code == 404
    finally:
        engine.close()


@pytest.mark.slow
def test_two_oracle_trials_on_local_give_a_row_per_prepare_ahead(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--harness", "oracle", "--sandbox", "local", "-n", "2",
                           "-c", "1", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["harness"], r["sandbox"], r["concurrency"], r["prepare_ahead"]) for r in rows] == [
        ("oracle", "local", 1, 0), ("oracle", "local", 1, 1)]
    for row in rows:
        assert (row["trials"], row["errors"], row["reward_mean"]) == (2, 0, 1.0), row
        assert row["trials_per_min"] > 0 and row["sandbox_start_p50"] > 0 and row["ready_p50"] is not None
    assert "ready p50" in done.stdout and "oracle      local" in done.stdout
