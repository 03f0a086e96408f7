"""tackroom-toucher: the greeter harness written for plugin contract 2 (``run`` receives the Task)."""

from __future__ import annotations

import tackroom


class ToucherHarness(tackroom.Harness):
    """Touches /app/done.txt and says so (contract 2: run(task, sandbox, policy))."""

    name = "toucher"

    async def run(self, task, sandbox, policy) -> tackroom.Trajectory:
        await sandbox.exec("touch /app/done.txt")
        return tackroom.Trajectory(final_answer=f"touched, as {task.id} asked")


tackroom_contract = 3


@tackroom.hookimpl
def tackroom_harnesses(register) -> None:
    register.add_harness(ToucherHarness)
