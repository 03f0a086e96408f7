"""Real runs of every first-party harness (answer, terminus, archipelago, opencode; scripted models as each
harness's own tests use them), exported to Harbor's ATIF and read back: the very trajectory and result return.

Each run goes through `tackroom run`'s machinery (run_config): the sandbox, the policy gateway where the harness
is chat-only (so token ids are recorded), the verifier. Harbor's own ATIF models check the documents where
Harbor is installed (``pip install harbor``); the package's models always do.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tackroom import Trajectory
from tackroom_app import RunConfig, run_config
from tackroom_viewer.atif import from_atif, to_atif
from tackroom_viewer.atif_models import AtifTrajectory

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "tasks"
WORLD_TASK = REPO / "examples" / "worlds" / "acme" / "tasks" / "q3-revenue-by-region"
HARNESS_TESTS = REPO / "plugins" / "harnesses"
pytestmark = pytest.mark.slow


def scripted(harness: str) -> None:
    """Make a harness's own scripted-engine test module importable (its tests keep it beside them)."""
    path = str(HARNESS_TESTS / harness / "tests")
    if path not in sys.path:
        sys.path.insert(0, path)


@pytest.fixture(scope="module")
def tokenizer():
    from tackroom_gateway import load_tokenizer

    return load_tokenizer("smollm2")


def engine_double(tokenizer, replies: list[str]):
    """A token-level engine (``/v1/completions`` with ids and logprobs) saying ``replies`` in order, then the last."""
    from tackroom_gateway.testing import EngineReply, MisbehavingEngine

    eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return MisbehavingEngine([EngineReply.ok(r) for r in replies], then=EngineReply.ok(replies[-1]), model="smollm2",
                             encode=lambda text: tokenizer.encode(text, add_special_tokens=False) + [eot])


async def run(tmp_path: Path, task: Path, harness: dict[str, Any], policy: dict[str, Any]) -> Path:
    config = RunConfig.model_validate({
        "tasks": [str(task)], "harness": harness, "policy": policy,
        "runtime": {"out": str(tmp_path / "runs"), "attempts": 1}})
    run_dir, results, _ = await run_config(config, progress=False, run_id=harness["name"])
    (result,) = results
    assert result.error is None, result.error
    return run_dir / result.trial_id


def round_trip(trial: Path) -> dict[str, Any]:
    """Export the trial, check the document, import it: the same trajectory and result come back."""
    result = json.loads((trial / "result.json").read_text())
    trajectory = Trajectory.model_validate_json((trial / "trajectory.json").read_text())
    document = json.loads(json.dumps(to_atif(trajectory, result)))
    AtifTrajectory.model_validate(document)
    assert document["schema_version"] == "ATIF-v1.8"
    try:
        from harbor.models.trajectories import Trajectory as HarborTrajectory
    except ImportError:
        pass  # Harbor is optional: the package's own models checked the document
    else:
        HarborTrajectory.model_validate(document)
    back = from_atif(document)
    assert back.trajectory == trajectory
    assert back.result == result
    assert back.trial_id == result["trial_id"]
    return document


def agent_steps(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in document["steps"] if s["source"] == "agent"]


def check_tokens(document: dict[str, Any], trajectory_file: Path) -> None:
    """Each engine call's ids and logprobs are on the agent step it produced."""
    turns = json.loads(trajectory_file.read_text())["turns"]
    steps = agent_steps(document)
    assert turns and len(steps) == len(turns)
    for step, turn in zip(steps, turns):
        assert step["metrics"]["prompt_token_ids"] == turn["prompt_ids"]
        assert step["metrics"]["completion_token_ids"] == turn["completion_ids"]
        assert step["metrics"]["logprobs"] == turn["logprobs"]


def make_turn(*commands: str, complete: bool = False) -> str:
    """A valid Terminus reply typing ``commands``."""
    return json.dumps({"analysis": "", "plan": "", "task_complete": complete,
                       "commands": [{"keystrokes": c, "duration": 0.2} for c in commands]})


async def test_answer(tmp_path, tokenizer):
    async with engine_double(tokenizer, ["Hello, tackroom!"]) as engine:
        trial = await run(tmp_path, EXAMPLES / "hello-file", {"name": "answer", "answer_path": "/app/greeting.txt"},
                          {"base_url": engine.base_url, "model": "smollm2", "tokenizer": "smollm2"})
    document = round_trip(trial)
    assert [s["source"] for s in document["steps"]] == ["user", "agent"]
    check_tokens(document, trial / "trajectory.json")


async def test_terminus(tmp_path, tokenizer):
    replies = [make_turn("echo 'Hello, tackroom!' > /app/greeting.txt\n", complete=True), make_turn(complete=True)]
    async with engine_double(tokenizer, replies) as engine:
        trial = await run(tmp_path, EXAMPLES / "hello-file",
                          {"name": "terminus", "max_command_duration_sec": 1.0, "request_retries": 0},
                          {"base_url": engine.base_url, "model": "smollm2", "tokenizer": "smollm2"})
    document = round_trip(trial)
    check_tokens(document, trial / "trajectory.json")
    assert document["extra"]["tackroom"]["result"]["reward"] == 1.0


async def test_archipelago(tmp_path):
    scripted("archipelago")
    from archipelago_scripted_engine import ScriptedEngine, call

    answer = "region,revenue\nEast,209355.00\nNorth,212595.00\nSouth,365550.00\nWest,372435.00\n"
    script = [
        "I will total the Revenue column per region.\n"
        + call("sheets_sum_column", path="finance/q3_sales.xlsx", column="Revenue", group_by="Region"),
        "Now I write the CSV.\n"
        + call("files_write_text_file", path="/workspace/output/revenue_by_region.csv", content=answer),
        "I wrote /workspace/output/revenue_by_region.csv with the four regions.",
    ]
    async with ScriptedEngine(script) as engine:
        trial = await run(tmp_path, WORLD_TASK, {"name": "archipelago", "max_steps": 5},
                          {"base_url": engine.url, "model": "scripted"})
    document = round_trip(trial)
    check_tokens(document, trial / "trajectory.json")
    calls = [c for s in agent_steps(document) for c in s.get("tool_calls", [])]
    assert [c["function_name"] for c in calls] == ["sheets_sum_column", "files_write_text_file"]
    assert calls[0]["arguments"]["column"] == "Revenue"
    results = [r for s in agent_steps(document) for r in (s.get("observation") or {}).get("results", [])]
    assert [r["source_call_id"] for r in results] == [c["tool_call_id"] for c in calls]
    assert "East,209355" in results[0]["content"]


def roomy_hello_file(root: Path) -> Path:
    """hello-file with a longer agent timeout: OpenCode's start-up on a busy shared machine takes tens of seconds."""
    import shutil

    task = root / "hello-file"
    shutil.copytree(EXAMPLES / "hello-file", task)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 60", "timeout_sec = 300"))
    return task


async def test_opencode(tmp_path, tokenizer):
    from tackroom_agent_kit.testing import ScriptedEngineForTests, serve, tool_call
    from tackroom_opencode.install import ensure_installed

    await ensure_installed()
    solve = tool_call("bash", command="printf 'Hello, tackroom!\\n' > /app/greeting.txt", description="write it")
    engine = ScriptedEngineForTests(tokenizer, replies=[solve, "Created /app/greeting.txt."])
    async with serve(engine.app()) as url:
        trial = await run(tmp_path, roomy_hello_file(tmp_path / "tasks"), {"name": "opencode"},
                          {"base_url": url, "tokenizer": "smollm2",
                           "sampling": {"temperature": 0.0, "max_tokens": 256}})
    document = round_trip(trial)
    check_tokens(document, trial / "trajectory.json")
    (step, *_) = [s for s in agent_steps(document) if s.get("tool_calls")]
    assert step["tool_calls"][0]["function_name"] == "bash"
    assert "greeting.txt" in step["tool_calls"][0]["arguments"]["command"]
    assert step["observation"]["results"][0]["source_call_id"] == step["tool_calls"][0]["tool_call_id"]
