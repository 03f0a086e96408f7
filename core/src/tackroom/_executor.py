"""The executor interface: where one trial attempt runs (a plugin kind, like harnesses and sandboxes)."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from tackroom._attempt import AttemptPlan, run_attempt
from tackroom._plugin import NoOptions, Plugin, PluginKind, PluginOptions

if TYPE_CHECKING:
    from tackroom._manager import PluginManager
    from tackroom._trajectory import Trajectory
    from tackroom._trial import TrialResult


class Executor(Plugin):
    """Runs trial attempts, each given as an :class:`~tackroom.executors.AttemptPlan`: it decides only where
    :func:`~tackroom.executors.run_attempt` runs one (in-process for ``asyncio``; a Ray worker, the plan pickled,
    for tackroom-ray's ``ray``) and never sees the runtime, which keeps retries, resume, the run directory, policy
    sessions, hooks and progress. :meth:`run` never raises for a failed attempt: the result's ``error`` says why.
    """

    kind: ClassVar[PluginKind] = "executor"
    Options: ClassVar[type[PluginOptions]] = NoOptions
    prepares_ahead: ClassVar[bool] = False
    """Whether :meth:`run` takes ``turn`` (an :class:`asyncio.Semaphore` of the runtime's ``concurrency``) and
    passes it to :func:`~tackroom.executors.run_attempt`, so the runtime can prepare trials ahead of their turn."""

    async def start(self, plans: list[AttemptPlan]) -> None:
        """Called by ``run_all`` before the first trial with every trial's first attempt: connect, and
        refuse what cannot run here."""

    def max_in_flight(self, concurrency: int) -> int:
        """How many trials ``run_all`` keeps in flight, given the runtime's ``concurrency``."""
        return concurrency

    @abc.abstractmethod
    async def run(self, plan: AttemptPlan, *, manager: PluginManager,
                  on_started: Callable[[], None]) -> tuple[TrialResult, Trajectory]:
        """Run one attempt (sandbox start → harness → verify → teardown) and return its result and trajectory.

        ``manager`` is the caller's plugin manager (for error classification where the attempt runs in
        this process); call ``on_started`` once the attempt has begun wherever it runs."""


class AsyncioExecutor(Executor):
    """In-process: every attempt shares this Python process; the cheapest way to run up to a few dozen trials."""

    name = "asyncio"
    prepares_ahead = True

    async def run(self, plan: AttemptPlan, *, manager: PluginManager, on_started: Callable[[], None],
                  turn: asyncio.Semaphore | None = None) -> tuple[TrialResult, Trajectory]:
        return await run_attempt(plan, manager=manager, on_started=on_started, turn=turn)
