"""`tackroom run --harness mini-swe-agent` as a user runs it, against the real local vLLM (SmolLM2-135M), through the
policy gateway the runtime puts in front of a `chat` harness.

The 135M model does not solve the task (reward 0 is expected); what must hold is that the trial completes
without an infra error, the compact profile fits the small context, and each model call mini-swe-agent made is a
recorded gateway turn with its exact tokens, paired with the trajectory's assistant messages by position.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from mini_swe_agent_fixtures import EXAMPLES


@pytest.mark.engine
def test_run_on_the_real_engine_through_the_gateway(tmp_path, engine_url):
    out = subprocess.run(
        [sys.executable, "-m", "tackroom_app", "run", str(EXAMPLES / "hello-file"), "--harness", "mini-swe-agent",
         "--sandbox", "local", "--base-url", engine_url, "--out", str(tmp_path), "--run-id", "r", "--json",
         "-O", "max_turns=3"],
        capture_output=True, text=True, timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (trial,) = json.loads(out.stdout)["trials"]
    assert trial["error"] is None or trial["error"]["class"] == "model", trial["error"]
    folder = tmp_path / "r" / trial["trial_id"]
    traj = json.loads((folder / "trajectory.json").read_text())
    result = json.loads((folder / "result.json").read_text())
    assert any("profile compact" in n for n in result["notes"]), result["notes"]
    assistant = [m for m in traj["messages"] if m["role"] == "assistant"]
    assert 1 <= len(assistant) <= 3 and traj["messages"][0]["role"] == "system"
    # one gateway turn per answered model call, in order, each token-exact (a call the deadline cut may have
    # finished on the engine after the agent stopped waiting: one turn more than replies)
    assert len(assistant) == result["metrics"]["turns"]
    stopped = trial["error"] is not None and trial["error"]["type"] == "AgentDeadlineError"
    assert len(traj["turns"]) in ((len(assistant), len(assistant) + 1) if stopped else (len(assistant),))
    assert len(traj["token_ids"]) == len(traj["loss_mask"]) and sum(traj["loss_mask"]) > 0
    last = traj["turns"][-1]
    assert traj["token_ids"][-len(last["completion_ids"]):] == last["completion_ids"]
