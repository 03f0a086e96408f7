"""Harnesses that misbehave on purpose, importable by Ray workers (the tests put this folder on their PYTHONPATH).

Each is the oracle harness plus one fault, triggered per task through a
marker file so "only on the first attempt" holds across worker processes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

from pydantic import Field

from tackroom import Trajectory
from tackroom.testing import run_harness_checks, run_sandbox_checks
from tackroom_app import get_plugin_manager
from tackroom_local import LocalSandboxProvider

OracleHarness = get_plugin_manager().get("harness", "oracle")  # the built-in, by name
OracleOptions = OracleHarness.Options


class FaultOptions(OracleOptions):
    marker_dir: str = Field(description="Where the per-task 'fault already happened' markers go")
    every_attempt: bool = Field(default=False, description="Misbehave on every attempt, not only the first")
    seconds: float = Field(default=0.0, description="How long to block or wait")


class _Faulty(OracleHarness):
    """Oracle, with a fault on the first attempt of each task."""

    Options = FaultOptions

    def _first_time(self, task) -> bool:
        marker = Path(self.options.marker_dir) / f"{task.id}.{self.name}"
        if marker.exists() and not self.options.every_attempt:
            return False
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(os.getpid()))
        return True


class KillsItsWorker(_Faulty):
    """SIGKILLs its own process mid-run (a worker lost to the OOM killer), then solves the task on the retry."""

    name = "kills-its-worker"

    async def run(self, task, sandbox, policy):
        if self._first_time(task):
            await sandbox.exec("echo half-done > /app/progress")
            os.kill(os.getpid(), signal.SIGKILL)
        return await super().run(task, sandbox, policy)


class WaitsToBeKilled(_Faulty):
    """Writes its pid to ``<marker_dir>/<task>.pid`` and waits, so a test can kill the process from outside."""

    name = "waits-to-be-killed"

    async def run(self, task, sandbox, policy):
        if self._first_time(task):
            (Path(self.options.marker_dir) / f"{task.id}.pid").write_text(str(os.getpid()))
            await asyncio.sleep(self.options.seconds)
        return await super().run(task, sandbox, policy)


class BlocksItsLoop(_Faulty):
    """Blocks its event loop with a synchronous sleep on the first attempt: no asyncio timeout can fire."""

    name = "blocks-its-loop"

    async def run(self, task, sandbox, policy):
        if self._first_time(task):
            time.sleep(self.options.seconds)
        return await super().run(task, sandbox, policy)


class ReportsItsProcess(OracleHarness):
    """Oracle that records where it ran: metrics ``pid`` and ``uvloop`` (1.0 when its event loop is uvloop's)."""

    name = "reports-its-process"

    async def run(self, task, sandbox, policy):
        trajectory: Trajectory = await super().run(task, sandbox, policy)
        uvloop = type(asyncio.get_running_loop()).__module__.startswith("uvloop")
        trajectory.metrics.update(pid=float(os.getpid()), uvloop=float(uvloop))
        return trajectory


def on_the_standard_loop(coro):
    """Run ``coro`` on asyncio's own loop, as the ray executor runs attempts: Ray's workers install
    uvloop, whose subprocesses inherit every open descriptor (an exec that leaves a background job
    then never sees EOF on its output)."""
    installed = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())
    try:
        return asyncio.run(coro)
    finally:
        asyncio.set_event_loop_policy(installed)


def sandbox_checks_here() -> dict:
    """The sandbox conformance suite on the local sandbox, in whatever process calls this."""
    report = on_the_standard_loop(run_sandbox_checks(LocalSandboxProvider()))
    return {"pid": os.getpid(), "report": report.model_dump()}


def harness_checks_here() -> dict:
    """The harness conformance suite for the oracle harness on the local sandbox, in this process."""
    report = on_the_standard_loop(run_harness_checks(OracleHarness, sandbox=LocalSandboxProvider()))
    return {"pid": os.getpid(), "report": report.model_dump()}
