"""The ``oracle`` harness: uploads the task's ``solution/`` and runs ``solve.sh``."""

from __future__ import annotations

from pydantic import Field

from tackroom._errors import TaskError
from tackroom._harness import Harness
from tackroom._markers import hookimpl
from tackroom._plugin import PluginOptions
from tackroom._policy import Policy
from tackroom._sandbox import Sandbox
from tackroom._task import Task
from tackroom._trajectory import Trajectory


class OracleOptions(PluginOptions):
    solution_dir: str = Field(default="/solution", description="Where solution/ is uploaded in the sandbox")
    max_output_chars: int = Field(default=4000, description="How much of solve.sh's output the trajectory keeps")


class OracleHarness(Harness):
    """Runs the task's reference solution (solution/solve.sh); every valid task scores 1.0 under it."""

    name = "oracle"
    Options = OracleOptions

    async def setup(self, sandbox: Sandbox, task: Task) -> None:
        solve = task.solution_dir / "solve.sh"
        if not solve.is_file():
            raise TaskError(f"{solve}: missing; the oracle harness needs the task's reference solution")
        await sandbox.upload(task.solution_dir, self.options.solution_dir)

    async def run(self, task: Task, sandbox: Sandbox, policy: Policy | None) -> Trajectory:
        # The runtime enforces the agent timeout by cancelling us; this is only a backstop.
        timeout = task.config.agent.timeout_sec + 60
        result = await sandbox.exec(f"bash {self.options.solution_dir}/solve.sh", timeout=timeout)
        keep = self.options.max_output_chars
        output = (result.stdout[-keep:] + ("\n" + result.stderr[-keep:] if result.stderr else "")).strip()
        return Trajectory(
            messages=[
                {"role": "user", "content": task.instruction},
                {"role": "assistant", "content": f"$ bash solve.sh  (exit {result.exit_code})\n{output}"},
            ],
            final_answer=output,
            stop_reason="completed" if result.ok else "solution_failed",
            metrics={"turns": 1.0},
        )


@hookimpl
def tackroom_harnesses(register) -> None:
    register.add_harness(OracleHarness)
