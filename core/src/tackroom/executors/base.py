"""The executor interface: where one trial attempt runs."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from tackroom._policy import Policy
    from tackroom._runtime import TrialPlugins, TrialRuntime
    from tackroom._task import Task
    from tackroom._trajectory import Trajectory
    from tackroom._trial import Trial, TrialResult


class NoOptions(BaseModel):
    """An executor without settings."""

    model_config = ConfigDict(extra="forbid")


class Executor(abc.ABC):
    """Runs trial attempts for a :class:`~tackroom._runtime.TrialRuntime`.

    The runtime keeps everything that must behave the same whatever the
    executor: the attempts policy (tenacity retries of ``infra`` failures),
    resume, the run directory (it alone writes ``result.json`` and
    ``trajectory.json``, once per trial), per-trial policy sessions and the
    progress bar. An executor decides only where :meth:`run_attempt` happens:
    in-process (``asyncio``, core's own) or elsewhere (``ray``, from
    ``tackroom-ray``: a worker process of a Ray cluster). Executors are
    registered through the ``tackroom_executors`` hook.
    Like :meth:`TrialRuntime.run_attempt`, :meth:`run_attempt` never raises
    for a failed attempt; it returns a result whose ``error`` is classified.
    """

    name: ClassVar[str]
    Options: ClassVar[type[BaseModel]] = NoOptions

    def __init__(self, options: BaseModel | None = None) -> None:
        self.options = options if options is not None else self.Options()

    async def start(self, items: list[tuple[Trial, Task, TrialPlugins]]) -> None:
        """Called by ``run_all`` before the first trial: connect, and refuse what cannot run here."""
        return None

    def max_in_flight(self, concurrency: int) -> int:
        """How many trials ``run_all`` keeps in flight, given the runtime's ``concurrency``."""
        return concurrency

    @abc.abstractmethod
    async def run_attempt(self, runtime: TrialRuntime, trial: Trial, task: Task, plugins: TrialPlugins,
                          attempt: int, policy: Policy | None = None) -> tuple[TrialResult, Trajectory]:
        """Run one attempt (sandbox start → harness → verify → teardown) and return its result and trajectory."""

    def describe(self) -> dict[str, Any]:
        """What a run records about its executor."""
        return {"name": self.name, **self.options.model_dump(mode="json")}
