"""The executor interface: where one trial attempt runs."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from tackroom._attempt import AttemptPlan
    from tackroom._manager import PluginManager
    from tackroom._trajectory import Trajectory
    from tackroom._trial import TrialResult


class NoOptions(BaseModel):
    """An executor without settings."""

    model_config = ConfigDict(extra="forbid")


class Executor(abc.ABC):
    """Runs trial attempts, each given as an :class:`~tackroom.executors.AttemptPlan`.

    The runtime keeps everything that must behave the same whatever the
    executor: the attempts policy (tenacity retries of ``infra`` failures),
    resume, the run directory (it alone writes ``result.json`` and
    ``trajectory.json``, once per trial), per-trial policy sessions, lifecycle
    hooks and the progress bar. It builds each attempt's plan; an executor
    decides only where :func:`~tackroom.executors.run_attempt` runs it:
    in-process (``asyncio``, core's own) or elsewhere (``ray``, from
    ``tackroom-ray``: a worker process of a Ray cluster, the plan pickled).
    An executor never sees the runtime. Executors are registered through the
    ``tackroom_executors`` hook. :meth:`run` never raises for a failed
    attempt; it returns a result whose ``error`` is classified.
    """

    name: ClassVar[str]
    Options: ClassVar[type[BaseModel]] = NoOptions

    def __init__(self, options: BaseModel | None = None) -> None:
        self.options = options if options is not None else self.Options()

    async def start(self, plans: list[AttemptPlan]) -> None:
        """Called by ``run_all`` before the first trial with every trial's first attempt: connect, and
        refuse what cannot run here."""
        return None

    def max_in_flight(self, concurrency: int) -> int:
        """How many trials ``run_all`` keeps in flight, given the runtime's ``concurrency``."""
        return concurrency

    @abc.abstractmethod
    async def run(self, plan: AttemptPlan, *, manager: PluginManager,
                  on_started: Callable[[], None]) -> tuple[TrialResult, Trajectory]:
        """Run one attempt (sandbox start → harness → verify → teardown) and return its result and trajectory.

        ``manager`` is the caller's plugin manager (for error classification where the attempt runs in
        this process); call ``on_started`` once the attempt has begun wherever it runs."""

    def describe(self) -> dict[str, Any]:
        """What a run records about its executor."""
        return {"name": self.name, **self.options.model_dump(mode="json")}
