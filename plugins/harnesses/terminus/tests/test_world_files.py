"""A world task under terminus: the world's files are at its mount before the first screen, so the same task
folder runs under terminus and archipelago without copying its data into environment/."""

from __future__ import annotations

from pathlib import Path

from tackroom import load_task
from tackroom_terminus import TerminusHarness

LOOKUP = Path(__file__).resolve().parents[4] / "examples" / "worlds" / "lookup" / "heldout"


async def test_the_world_files_are_mounted_in_setup(local_sandbox):
    task = load_task(LOOKUP / "tasks" / "csv-2-01")
    harness = TerminusHarness({})
    await harness.setup(local_sandbox, task)  # the sandbox's stop ends its tmux session
    assert "terminus: world files of 'heldout' mounted at /workspace" in harness.setup_notes
    csv = await local_sandbox.exec("head -1 /workspace/inventory.csv; ls /workspace/logs")
    assert csv.stdout.split() == ["item,code,qty", "app.log"]
