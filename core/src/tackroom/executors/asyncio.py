"""The ``asyncio`` executor: attempts run as coroutines on the caller's event loop (the default).

Registered through the ``tackroom_executors`` hook by core's entry point, like any executor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tackroom._markers import hookimpl
from tackroom.executors.base import Executor

if TYPE_CHECKING:
    from tackroom._policy import Policy
    from tackroom._registrar import Registrar
    from tackroom._runtime import TrialPlugins, TrialRuntime
    from tackroom._task import Task
    from tackroom._trajectory import Trajectory
    from tackroom._trial import Trial, TrialResult


class AsyncioExecutor(Executor):
    """In-process: every attempt shares this Python process; the cheapest way to run up to a few dozen trials."""

    name = "asyncio"

    async def run_attempt(self, runtime: TrialRuntime, trial: Trial, task: Task, plugins: TrialPlugins,
                          attempt: int, policy: Policy | None = None) -> tuple[TrialResult, Trajectory]:
        return await runtime.run_attempt(trial, task, plugins, attempt, policy=policy)


@hookimpl
def tackroom_executors(register: Registrar) -> None:
    register.add_executor(AsyncioExecutor)
