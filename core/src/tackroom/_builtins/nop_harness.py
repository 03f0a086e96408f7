"""The ``nop`` harness: does nothing. A task that scores above 0 under it is broken."""

from __future__ import annotations

from tackroom._harness import Harness
from tackroom._markers import hookimpl
from tackroom._policy import Policy
from tackroom._sandbox import Sandbox
from tackroom._task import Task
from tackroom._trajectory import Trajectory


class NopHarness(Harness):
    """Does nothing; the floor every task must score 0 on."""

    name = "nop"

    async def run(self, task: Task, sandbox: Sandbox, policy: Policy | None) -> Trajectory:
        return Trajectory(messages=[{"role": "user", "content": task.instruction}], stop_reason="nop")


@hookimpl
def tackroom_harnesses(register) -> None:
    register.add_harness(NopHarness)
