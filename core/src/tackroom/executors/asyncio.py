"""The ``asyncio`` executor: attempts run as coroutines on the caller's event loop (the default).

Registered through the ``tackroom_executors`` hook by core's entry point, like any executor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tackroom._attempt import AttemptPlan, run_attempt
from tackroom._markers import hookimpl
from tackroom.executors.base import Executor

if TYPE_CHECKING:
    from tackroom._manager import PluginManager
    from tackroom._registrar import Registrar
    from tackroom._trajectory import Trajectory
    from tackroom._trial import TrialResult


class AsyncioExecutor(Executor):
    """In-process: every attempt shares this Python process; the cheapest way to run up to a few dozen trials."""

    name = "asyncio"

    async def run(self, plan: AttemptPlan, *, manager: PluginManager,
                  on_started: Callable[[], None]) -> tuple[TrialResult, Trajectory]:
        return await run_attempt(plan, manager=manager, on_started=on_started)


@hookimpl
def tackroom_executors(register: Registrar) -> None:
    register.add_executor(AsyncioExecutor)
