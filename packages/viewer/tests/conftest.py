"""Fixtures for the viewer's tests: run folders made with tackroom's own writers (viewer_runs.py)."""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # viewer_runs.py (tests use --import-mode=importlib)

from viewer_runs import HOSTILE, answer_run, make_tasks, matrix_run, write_steps


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    from tackroom_gateway import load_tokenizer

    return load_tokenizer("smollm2")


@pytest.fixture(scope="session")
def runs_root(tmp_path_factory, smollm2_tokenizer) -> Path:
    """``runs/``: ``base`` (hostile answers, rewards 0.5 and 0), ``trained`` (rewards 1 and 0), ``matrix-demo`` (the
    two as model columns ``base`` and ``tuned``), ``train-demo`` (three steps; batch 1's trials in
    ``rollouts/step00001-…``)."""
    root = tmp_path_factory.mktemp("viewer")
    tasks = make_tasks(root / "tasks")
    runs = root / "runs"

    async def make() -> None:
        await answer_run(tasks, runs, "base", HOSTILE, smollm2_tokenizer)
        await answer_run(tasks, runs, "trained", "blue", smollm2_tokenizer)
        await matrix_run(tasks, runs, "matrix-demo", {"base": HOSTILE, "tuned": "blue"}, smollm2_tokenizer)
        train = runs / "train-demo"
        await answer_run(tasks[:1], train / "rollouts", "step00001-00001-a1b2c3", "blue", smollm2_tokenizer)
        write_steps(train, [0.25, 0.5, 1.0])

    # in a thread of its own: Playwright's sync API may already run an event loop in this one
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, make()).result()
    return runs
