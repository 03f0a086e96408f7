"""A world task under mini-swe-agent: the world's files are at their mount before the agent's first command, as
under terminus, opencode and archipelago, so one task folder runs under every harness."""

from __future__ import annotations

from pathlib import Path

from tackroom import SandboxSpec, load_task
from tackroom_local import LocalSandboxProvider
from tackroom_mini_swe_agent.harness import MiniSweAgentHarness

LOOKUP = Path(__file__).resolve().parents[4] / "examples" / "worlds" / "lookup" / "heldout"


async def test_the_world_files_are_mounted_in_setup():
    task = load_task(LOOKUP / "tasks" / "csv-2-01")
    harness = MiniSweAgentHarness({})
    box = LocalSandboxProvider().create(SandboxSpec(name="mini-swe-agent-world"))
    await box.start()
    try:
        await harness.setup(box, task)
        assert harness.world_note == "world files of 'heldout' mounted at /workspace"
        csv = await box.exec("head -1 /workspace/inventory.csv; ls /workspace/logs")
        assert csv.stdout.split() == ["item,code,qty", "app.log"]
    finally:
        await box.stop()
