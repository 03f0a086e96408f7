"""The verifier interface: grading an episode."""

from __future__ import annotations

import abc
from typing import ClassVar

from tackroom._plugin import Plugin, PluginKind
from tackroom._reward import Reward
from tackroom._sandbox import Sandbox
from tackroom._task import Task
from tackroom._trajectory import Trajectory


class Verifier(Plugin):
    """A verifier plugin: turns a finished episode into a :class:`~tackroom._reward.Reward`.

    Runs after the harness, with the sandbox still up. Raise :class:`~tackroom._errors.TaskError`
    when the task cannot be graded (no tests, no reward written) — a broken task is never a pass.
    """

    kind: ClassVar[PluginKind] = "verifier"

    async def prepare(self, task: Task, sandbox: Sandbox) -> None:
        """Called before the harness runs (e.g. to snapshot files). Default: nothing."""

    @abc.abstractmethod
    async def verify(self, task: Task, sandbox: Sandbox, trajectory: Trajectory) -> Reward:
        """Grade the episode."""
