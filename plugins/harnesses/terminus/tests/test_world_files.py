"""A world task under terminus: the world's files are at its mount before the first screen, so the same task
folder runs under terminus and archipelago without copying its data into environment/."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tackroom import SandboxSpec, load_task
from tackroom_terminus import TerminusHarness
from tackroom_worlds import mount_world_files

LOOKUP = Path(__file__).resolve().parents[4] / "examples" / "worlds" / "lookup" / "heldout"


async def test_the_world_files_are_mounted_in_setup(local_sandbox):
    task = load_task(LOOKUP / "tasks" / "csv-2-01")
    harness = TerminusHarness({})
    await harness.setup(local_sandbox, task)  # the sandbox's stop ends its tmux session
    assert "terminus: world files of 'heldout' mounted at /workspace" in harness.setup_notes
    csv = await local_sandbox.exec("head -1 /workspace/inventory.csv; ls /workspace/logs")
    assert csv.stdout.split() == ["item,code,qty", "app.log"]


@pytest.mark.docker
async def test_the_world_files_reach_a_docker_sandbox_too(docker_provider):
    task = load_task(LOOKUP / "tasks" / "log-2-02")
    box = docker_provider.create(SandboxSpec(name=f"terminus-world-{uuid.uuid4().hex[:8]}"))
    await box.start()
    try:
        assert await mount_world_files(box, task) == "world files of 'heldout' mounted at /workspace"
        log = await box.exec("grep -c ERROR /workspace/logs/app.log")
        assert log.ok and int(log.stdout) == 2  # the image has no python3: the files need none
    finally:
        await box.stop()
