"""Fixtures: the Acme example world and a started local sandbox with it installed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tackroom import Task, load_task
from tackroom_app import sandbox_spec
from tackroom_local import LocalSandboxProvider

sys.path.insert(0, str(Path(__file__).parent))  # archipelago_scripted_engine, archipelago_paths
from archipelago_paths import TASKS, WORLD

# The world's servers, importable on the host for the per-server tests.
sys.path.insert(0, str(WORLD / "servers"))


@pytest.fixture
def world_task() -> Task:
    return load_task(TASKS / "q3-revenue-by-region")


@pytest.fixture
async def sandbox(world_task: Task):
    box = LocalSandboxProvider().create(sandbox_spec(world_task, "archipelago-test"))
    await box.start()
    try:
        yield box
    finally:
        await box.stop()


PICTURES = Path(__file__).parent / "worlds" / "pictures"


@pytest.fixture
def pictures_task() -> Task:
    """A world whose server returns images (three one-pixel PNGs; the red one is animals/fox.png)."""
    return load_task(PICTURES / "tasks" / "which-is-red")


@pytest.fixture
async def pictures_sandbox(pictures_task: Task):
    box = LocalSandboxProvider().create(sandbox_spec(pictures_task, "archipelago-test"))
    await box.start()
    try:
        yield box
    finally:
        await box.stop()
