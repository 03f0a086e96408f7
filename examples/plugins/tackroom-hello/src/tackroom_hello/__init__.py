"""tackroom-hello: one harness, registered through the ``tackroom`` entry-point group."""

from __future__ import annotations

from pydantic import Field

import tackroom


class HelloHarness(tackroom.Harness):
    """Writes a greeting into the sandbox and says it did."""

    name = "hello"

    class Options(tackroom.PluginOptions):
        greeting: str = Field(default="hello from tackroom-hello", description="Text to write")
        path: str = Field(default="/app/hello.txt", description="Where in the sandbox to write it")

    async def run(self, task, sandbox, policy) -> tackroom.Trajectory:
        await sandbox.write_file(self.options.path, self.options.greeting + "\n")
        return tackroom.Trajectory(
            messages=[
                {"role": "user", "content": task.instruction},
                {"role": "assistant", "content": f"wrote {self.options.path}"},
            ],
            final_answer=self.options.greeting,
        )


tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@tackroom.hookimpl
def tackroom_harnesses(register: tackroom.Registrar) -> None:
    register.add_harness(HelloHarness)
