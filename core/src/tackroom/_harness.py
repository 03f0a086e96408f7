"""The harness interface: the agent loop."""

from __future__ import annotations

import abc
from pathlib import Path
from typing import ClassVar

from tackroom._plugin import Plugin, PluginKind
from tackroom._policy import Policy
from tackroom._sandbox import Sandbox
from tackroom._task import Task
from tackroom._trajectory import Trajectory


class Harness(Plugin):
    """A harness plugin: drives one episode of an agent in a sandbox.

    The runtime calls :meth:`setup` once the sandbox is up, then :meth:`run` under the task's agent
    timeout (cancellation is how the timeout arrives: clean up in ``finally``). A harness reaches
    the model only through the :class:`~tackroom._policy.Policy` it is given. Raise
    :class:`~tackroom._errors.ModelError` for the policy's own failures (context exhausted, no valid
    answer) and :class:`~tackroom._errors.InfraError` for machinery failures. Its capabilities are
    :class:`~tackroom.Capability` names of kind ``harness``.
    """

    kind: ClassVar[PluginKind] = "harness"

    async def mounts(self, task: Task) -> dict[str, Path]:
        """Host folders to bind read-only into the sandbox of a trial of ``task``, by sandbox path
        (:attr:`~tackroom.SandboxSpec.mounts`): what the harness prepares once and shares between trials (packages,
        servers, binaries) instead of uploading it in every :meth:`setup`. Called before the sandbox starts, only for
        a sandbox that binds mounts (:class:`~tackroom.sandbox_features.ReadOnlyMounts`); :meth:`setup` finds what
        was bound in ``sandbox.spec.mounts`` and uploads the rest. Default: none."""
        return {}

    async def setup(self, sandbox: Sandbox, task: Task) -> None:
        """Prepare the sandbox for this harness (install tools, start servers). Default: nothing."""

    @abc.abstractmethod
    async def run(self, task: Task, sandbox: Sandbox, policy: Policy | None) -> Trajectory:
        """Run the episode on ``task`` (``task.instruction`` is the prompt; its config, paths and metadata are
        all here, so nothing needs keeping from :meth:`setup`) and return its trajectory.

        ``messages`` holds one assistant message per model call, in order (the viewer and ATIF pair them with the
        gateway's token turns by position). An episode that ends in an error raises it (a tackroom error) with
        the trajectory so far as its ``trajectory`` attribute: the runtime keeps and grades what was done."""
