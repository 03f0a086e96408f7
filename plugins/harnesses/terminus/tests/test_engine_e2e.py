"""terminus against the real local engine (SmolLM2-135M on vLLM) through the policy gateway.

The 135M model does not solve the task; what is checked is that the run is
clean (no infra/task error) and the trajectory is token-exact: each turn's
prompt extends the previous turn's exact ids, and the flattened sequence is
the last turn's prompt plus completion with the loss mask on generated tokens.
Kept lean (few turns, small max_tokens): the machine is shared.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tackroom_app import RunConfig, run_config
from tackroom_terminus.protocol import parse_reply

EXAMPLES = Path(__file__).resolve().parents[4] / "examples" / "tasks"
LEAN = {
    "structured_outputs": True, "structured_max_chars": 48, "structured_max_commands": 2, "max_turns": 3,
    "max_tokens": 256, "max_command_duration_sec": 1.0, "temperature": 0.0,
}


def hello_file(tmp_path: Path) -> Path:
    """examples/tasks/hello-file with a roomier agent timeout: the engine is shared, a turn can take 30 s."""
    task = shutil.copytree(EXAMPLES / "hello-file", tmp_path / "tasks" / "hello-file")
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 60", "timeout_sec = 400", 1))
    assert "timeout_sec = 400" in toml.read_text()
    return task


def assert_token_exact(traj: dict) -> None:
    turns = traj["turns"]
    assert turns, "the gateway recorded no turns"
    assert {t["branch"] for t in turns} == {0}, "the harness never rewrites history, so there is one branch"
    for prev, cur in zip(turns, turns[1:]):
        done = prev["prompt_ids"] + prev["completion_ids"]
        assert cur["prompt_ids"][: len(done)] == done, "a turn's prompt must extend the previous turn's exact ids"
        assert len(cur["prompt_ids"]) > len(done), "each turn adds the observation after the previous answer"
    last = turns[-1]
    assert traj["token_ids"] == last["prompt_ids"] + last["completion_ids"]
    generated = set()
    for t in turns:
        start = len(t["prompt_ids"])
        generated.update(range(start, start + len(t["completion_ids"])))
    assert traj["loss_mask"] == [1 if i in generated else 0 for i in range(len(traj["token_ids"]))]
    assert traj["logprobs"] is None or len(traj["logprobs"]) == len(traj["token_ids"])
    assistant = [m for m in traj["messages"] if m["role"] == "assistant"]
    assert len(assistant) == len(turns) == traj["metrics"]["turns"]


@pytest.mark.engine
def test_tackroom_run_terminus_on_the_real_model_is_clean_and_token_exact(tmp_path, engine_url):
    config = tmp_path / "run.toml"
    options = "\n".join(f"{k} = {json.dumps(v)}" for k, v in LEAN.items())
    config.write_text(f'[harness]\nname = "terminus"\n{options}\n')
    out = subprocess.run(
        [sys.executable, "-m", "tackroom_app", "run", str(hello_file(tmp_path)), "--config", str(config),
         "--base-url", engine_url, "--out", str(tmp_path / "runs"), "--run-id", "e2e", "--attempts", "1", "--json"],
        capture_output=True, text=True, timeout=550,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    trial = summary["trials"][0]
    assert trial["harness"] == "terminus" and trial["reward"] in (0.0, 1.0)
    assert trial["error"] is None or trial["error"]["class"] == "model", trial["error"]
    assert summary["errors"]["infra"] == 0 and summary["errors"]["task"] == 0
    run_dir = Path(summary["run_dir"]) / trial["trial_id"]
    traj = json.loads((run_dir / "trajectory.json").read_text())
    result = json.loads((run_dir / "result.json").read_text())
    assert_token_exact(traj)
    assert result["metrics"]["turns"] == len(traj["turns"]) <= LEAN["max_turns"]
    for turn, message in zip(traj["turns"], (m for m in traj["messages"] if m["role"] == "assistant")):
        assert message["content"].strip(), "every turn has an answer"
        if turn["finish_reason"] == "stop":  # the schema was enforced: a finished answer is a valid turn
            parsed = parse_reply(message["content"], max_duration=LEAN["max_command_duration_sec"])
            assert parsed.ok and not parsed.warnings, (message["content"], parsed)
            assert len(parsed.reply.plan) <= LEAN["structured_max_chars"]


@pytest.mark.engine
async def test_context_budget_ends_a_real_episode_as_a_model_error(tmp_path, engine_url):
    cfg = RunConfig.model_validate({
        "tasks": [str(hello_file(tmp_path))],
        "harness": {"name": "terminus", **LEAN, "max_turns": 10, "context_limit_tokens": 700},
        "policy": {"base_url": engine_url, "tokenizer": "smollm2"},
        "runtime": {"out": str(tmp_path / "runs"), "attempts": 1},
    })
    run_dir, results, _ = await run_config(cfg, progress=False, run_id="budget")
    result = results[0]
    assert result.error is not None and result.error.error_class == "model", result.error
    assert result.error.type == "ContextExhaustedError" and "700-token context" in result.error.message
    assert result.stop_reason == "context_exhausted" and result.reward in (0.0, 1.0)
    traj = json.loads((run_dir / result.trial_id / "trajectory.json").read_text())
    assert_token_exact(traj)
    assert 1 <= len(traj["turns"]) < 10
    assert len(traj["token_ids"]) + LEAN["max_tokens"] <= 700 + 200, "it stopped near the budget, not long after"
