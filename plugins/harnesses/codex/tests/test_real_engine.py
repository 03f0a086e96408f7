"""`tackroom run --harness codex` as a user runs it, against the real local vLLM (SmolLM2-135M, small context).

The 135M model does not solve the task (reward 0 is expected); what must hold is that the trial completes without
an infra error, Codex's compact profile fits the small context, the gateway session recorded each model call Codex
made through the Responses dialect, and the trajectory holds the exact tokens of each call.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[4] / "examples" / "tasks"



@pytest.mark.engine
def test_run_on_the_real_engine_in_the_local_sandbox(tmp_path, engine_url, codex_install):
    out = subprocess.run(
        [sys.executable, "-m", "tackroom_app", "run", str(EXAMPLES / "hello-file"), "--harness", "codex",
         "--sandbox", "local", "--base-url", engine_url, "--out", str(tmp_path), "--run-id", "r", "--json"],
        capture_output=True, text=True, timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    (trial,) = data["trials"]
    assert data["errors"]["infra"] == 0 and data["errors"]["task"] == 0, trial["error"]
    assert trial["reward"] is not None
    traj = json.loads((tmp_path / "r" / trial["trial_id"] / "trajectory.json").read_text())
    result = json.loads((tmp_path / "r" / trial["trial_id"] / "result.json").read_text())
    assert any("profile compact" in n for n in result["notes"]), result["notes"]
    assert traj["messages"][0]["role"] == "user" and "code_call_share" in result["metrics"]
    # The model was reached: the gateway session recorded at least one turn, each token-exact.
    assert len(traj["turns"]) >= 1
    assert len(traj["turns"]) >= result["metrics"]["turns"] - 1
    assert len(traj["token_ids"]) == len(traj["loss_mask"])
    last = traj["turns"][-1]
    assert traj["token_ids"] == last["prompt_ids"] + last["completion_ids"]
