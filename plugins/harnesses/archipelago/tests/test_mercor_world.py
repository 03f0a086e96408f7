"""Mercor's real MCP servers (filesystem, chat) as tackroom worlds, in a docker sandbox on Python 3.13.

Needs the Mercor checkout (``../shared/mercor-archipelago`` beside the repo, or
``$TACKROOM_MERCOR_ARCHIPELAGO``), a Docker engine and a ``python:3.13-slim-bookworm`` image (here
``../shared/tools/tb2-python-base.sh`` builds one offline); each is a skip locally and a failure under CI.
Slow: the first run installs each server's packages (FastMCP, litellm, ...) on the host; every run uploads
them and waits for the servers to list their tools.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from archipelago_scripted_engine import ScriptedEngine, call
from test_mercor_import import SAMPLE, mercor_checkout

import tackroom.app
from tackroom import Policy, load_task
from tackroom.app import sandbox_spec
from tackroom.testing import skip_or_fail
from tackroom_archipelago import ArchipelagoHarness
from tackroom_archipelago.mercor_import import import_tasks
from tackroom_rubric_judge import RubricJudgeVerifier
from tackroom_rubric_judge.testing import MisbehavingJudgeServerForTests

pytestmark = [pytest.mark.slow, pytest.mark.docker]

REPO = Path(__file__).resolve().parents[4]
EXAMPLE_TASK = REPO / "examples" / "worlds" / "mercor" / "tasks" / "find-q3-revenue"
IMAGE = "python:3.13-slim-bookworm"


def docker_with_python313() -> None:
    try:
        found = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        skip_or_fail(f"no usable docker CLI/engine ({exc})")
    if found.returncode != 0:
        skip_or_fail(f"no {IMAGE} image (Mercor's servers need Python 3.13): `docker pull {IMAGE}`, or offline "
                     "../shared/tools/tb2-python-base.sh")


def docker_sandbox(task):
    from tackroom_docker import DockerProvider

    # removing a container that holds the servers' sites (about 600 MB each) takes a while on a busy host
    return DockerProvider({"cli_timeout_sec": 300}).create(sandbox_spec(task, "mercor-world"))


async def test_the_example_world_runs_mercors_filesystem_and_chat_servers(monkeypatch):
    checkout = mercor_checkout()
    docker_with_python313()
    monkeypatch.setenv("TACKROOM_MERCOR_ARCHIPELAGO", str(checkout))
    task = load_task(EXAMPLE_TASK)
    box = docker_sandbox(task)
    await box.start()
    try:
        harness = ArchipelagoHarness({"max_steps": 4, "tools_include": ["filesystem_read_text_file", "chat_*"]})
        await harness.setup(box, task)
        listing = harness.gateway.listing
        assert (listing["filesystem"].tools, listing["chat"].tools) == (6, 9), listing
        assert all(s.seconds > 0 for s in listing.values())
        print("listing:", harness.gateway.describe(), "| startup", harness.gateway.startup_s, "s")
        assert harness.world.interpreters["filesystem"].version == "3.13"
        script = [
            call("filesystem_read_text_file", file_path="/reports/q3-summary.md"),
            call("chat_post_message", channel_id="Space AAQAops", message="West Q3 revenue: 372,435 USD"),
            "I posted the West figure (372,435 USD) in ops.",
        ]
        async with ScriptedEngine(script, max_model_len=16384) as engine:
            traj = await harness.run(task, box, Policy(base_url=engine.url, model="scripted"))
        read, posted = [m["content"] for m in traj.messages if m["role"] == "tool"]
        assert "West 372,435" in read, read
        assert traj.metrics["tool_call_success_rate"] == 1.0, posted
        reward = await tackroom.app.instantiate("verifier", "test-script").verify(task, box, traj)
        assert reward.score == 1.0, reward.details
    finally:
        await box.stop()


async def test_the_imported_public_sample_starts_lists_and_grades(tmp_path, monkeypatch):
    """Mercor's simple_task: imported, its world started, its tools listed, a scripted episode graded by the
    rubric judge on the snapshot diff (a scripted judge server: no judge model runs here)."""
    mercor_checkout()
    docker_with_python313()
    [imported] = import_tasks(SAMPLE, tmp_path / "tasks")
    task = load_task(imported.path)
    prompts: list[str] = []

    def decide(prompt: str) -> bool:  # passes when the agent's answer names the gorilla's path
        prompts.append(prompt)
        answer = prompt.split("# The agent's final answer", 1)[1].split("# ", 1)[0]
        return "/animals/xk92m/qz7fw.png" in answer

    box = docker_sandbox(task)
    with MisbehavingJudgeServerForTests(decide=decide) as server:
        judge = RubricJudgeVerifier({"base_url": server.base_url, "model": "judge"})
        await box.start()
        try:
            await judge.prepare(task, box)
            harness = ArchipelagoHarness({"max_steps": 4})
            await harness.setup(box, task)
            assert harness.gateway.listing["filesystem"].tools == 6
            print("listing:", harness.gateway.describe(), "| startup", harness.gateway.startup_s, "s")
            script = [
                call("filesystem_get_directory_tree", path="/animals"),
                call("filesystem_read_image_file", file_path="/animals/xk92m/qz7fw.png"),
                "The gorilla is at /animals/xk92m/qz7fw.png",
            ]
            async with ScriptedEngine(script, max_model_len=16384) as engine:
                traj = await harness.run(task, box, Policy(base_url=engine.url, model="scripted"))
            assert traj.messages[0]["content"].startswith("You are an AI assistant that completes tasks")
            tree, image = [m["content"] for m in traj.messages if m["role"] == "tool"]
            assert "xk92m" in tree and "qz7fw.png" in tree, tree
            # the picture is a JPEG whatever its name says (sniffed); a completions endpoint gets the placeholder
            assert "[image image/jpeg" in image, image[:300]
            reward = await judge.verify(task, box, traj)
        finally:
            await box.stop()
    assert reward.score == 1.0, json.dumps(reward.details)[:2000]
    # the judge saw the diff against the imported snapshot: the agent changed nothing
    assert "# Files the agent changed\nFiles under /filesystem: 0 added, 0 removed, 0 modified, 4 unchanged." \
        in prompts[0], prompts[0]
