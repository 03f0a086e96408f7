"""`tackroom run --harness opencode` as a user runs it, against the real local vLLM (SmolLM2-135M, 4096 context).

The 135M model does not solve the task (reward 0 is expected); what must hold is
that every trial completes without an infra error, OpenCode's compact profile
fits the small context, and the trajectory holds the exact tokens of each call.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from opencode_tasks import EXAMPLES


def tackroom_run(tmp_path, engine_url: str, sandbox: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "tackroom_app", "run", str(EXAMPLES / "hello-file"), "--harness", "opencode",
         "--sandbox", sandbox, "--base-url", engine_url, "--out", str(tmp_path), "--run-id", "r", "--json"],
        capture_output=True, text=True, timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def check(tmp_path, data: dict) -> None:
    (trial,) = data["trials"]
    assert data["errors"]["infra"] == 0 and data["errors"]["task"] == 0, trial["error"]
    assert trial["reward"] is not None
    traj = json.loads((tmp_path / "r" / trial["trial_id"] / "trajectory.json").read_text())
    result = json.loads((tmp_path / "r" / trial["trial_id"] / "result.json").read_text())
    assert any("profile compact (context 4096)" in n for n in result["notes"]), result["notes"]
    assert traj["messages"][0]["role"] == "user" and "code_call_share" in result["metrics"]
    # How many turns fit in the task's 60 s depends on the machine; each one that finished is token-exact.
    assert len(traj["turns"]) >= result["metrics"]["turns"] - 1
    assert len(traj["token_ids"]) == len(traj["loss_mask"])
    if traj["turns"]:
        last = traj["turns"][-1]
        assert traj["token_ids"] == last["prompt_ids"] + last["completion_ids"]


@pytest.mark.engine
def test_run_on_the_real_engine_in_the_local_sandbox(tmp_path, engine_url, opencode_install):
    check(tmp_path, tackroom_run(tmp_path, engine_url, "local"))


@pytest.mark.engine
@pytest.mark.docker
def test_run_on_the_real_engine_in_docker(tmp_path, engine_url, opencode_install, docker_ready):
    check(tmp_path, tackroom_run(tmp_path, engine_url, "docker"))
