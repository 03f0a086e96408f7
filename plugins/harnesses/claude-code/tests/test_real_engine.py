"""`tackroom run --harness claude-code` as a user runs it, against the real local vLLM (SmolLM2-135M).

The 135M model does not solve the task (reward 0 is expected); what must hold is that the trial completes without an
infra error, the compact profile fits the small context, Claude Code's calls reached the model through the gateway's
Messages dialect, and the gateway session recorded each finished turn token-exactly.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[4] / "examples" / "tasks"



@pytest.mark.engine
def test_run_on_the_real_engine_in_the_local_sandbox(tmp_path, engine_url, claude_install):
    # The example task, with time for a few turns of a CPU-bound engine shared by the machine (60 s may not see the
    # first ~2.5k-token prompt answered), and short turns so that three fit the 4096-token context.
    task = shutil.copytree(EXAMPLES / "hello-file", tmp_path / "tasks" / "hello-file")
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 60", "timeout_sec = 300"))
    out = subprocess.run(
        [sys.executable, "-m", "tackroom_app", "run", str(task), "--harness", "claude-code",
         "-O", "max_turns=3", "-O", "max_tokens_per_turn=96",
         "--sandbox", "local", "--base-url", engine_url, "--out", str(tmp_path / "runs"), "--run-id", "r", "--json"],
        capture_output=True, text=True, timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    (trial,) = data["trials"]
    assert data["errors"]["infra"] == 0 and data["errors"]["task"] == 0, trial["error"]
    assert trial["reward"] is not None
    folder = tmp_path / "runs" / "r" / trial["trial_id"]
    traj = json.loads((folder / "trajectory.json").read_text())
    result = json.loads((folder / "result.json").read_text())
    assert any("claude-code 2.1.332, profile compact" in n for n in result["notes"]), result["notes"]
    assert traj["messages"][0]["role"] == "user" and result["metrics"]["turns"] >= 1
    # the gateway session recorded the model's turns (how many finish in the task's 60 s depends on the machine)
    assert traj["turns"] and len(traj["turns"]) >= result["metrics"]["turns"] - 1
    assert len(traj["token_ids"]) == len(traj["loss_mask"])
    last = traj["turns"][-1]
    assert traj["token_ids"] == last["prompt_ids"] + last["completion_ids"]
