"""tackroom-greeter: a harness written for plugin contract 1, when ``run`` received the instruction text.

It declares no ``tackroom_contract`` (contract 1 had none to declare).
"""

from __future__ import annotations

import tackroom


class GreeterHarness(tackroom.Harness):
    """Touches /app/done.txt and greets (contract 1: run(instruction, sandbox, policy))."""

    name = "greeter"

    async def run(self, instruction, sandbox, policy) -> tackroom.Trajectory:
        await sandbox.exec("touch /app/done.txt")
        return tackroom.Trajectory(final_answer=f"hello; you said: {instruction}")


@tackroom.hookimpl
def tackroom_harnesses(register) -> None:
    register.add_harness(GreeterHarness)
