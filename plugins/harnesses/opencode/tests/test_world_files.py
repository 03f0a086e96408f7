"""A world task under opencode: the world's files are at its mount after setup, so OpenCode's read/grep/bash
tools see the same data archipelago's MCP servers serve, from one task folder."""

from __future__ import annotations

from pathlib import Path

from tackroom import load_task
from tackroom_app import sandbox_spec
from tackroom_local import LocalSandboxProvider
from tackroom_opencode.harness import OpenCodeHarness

LOOKUP = Path(__file__).resolve().parents[4] / "examples" / "worlds" / "lookup" / "heldout"


async def test_the_world_files_are_mounted_in_setup(opencode_install):
    task = load_task(LOOKUP / "tasks" / "mail-2-03")
    box = LocalSandboxProvider().create(sandbox_spec(task, "opencode-world-files"))
    await box.start()
    try:
        harness = OpenCodeHarness({})
        await harness.setup(box, task)
        assert harness.world_note == "world files of 'heldout' mounted at /workspace"
        listed = await box.exec("ls /workspace/mail | head -1; grep -c . /workspace/inventory.csv")
        assert listed.ok and listed.stdout.split()[0].endswith(".txt") and int(listed.stdout.split()[1]) > 1
    finally:
        await box.stop()
