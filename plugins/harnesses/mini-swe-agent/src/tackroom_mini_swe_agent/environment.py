"""mini-swe-agent's ``Environment`` over the trial's sandbox: each action is one command in a fresh shell there.

It behaves as mini-swe-agent's own environments do (``LocalEnvironment``, ``DockerEnvironment``): stdout and
stderr in one stream, a timeout per command reported to the model as an exception in the observation, the
submit marker on the first line of a successful command's output ends the episode (``Submitted``). The
observation template (mini-swe-agent's, in the model's config) cuts long output; the sandbox's own output cap
is said in the output. Template variables describe the sandbox (``uname``), never the host the harness runs on.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from tackroom import SandboxTimeoutError
from tackroom_mini_swe_agent.startup import prepare_import
from tackroom_sandbox_kit import SyncSandbox

prepare_import()
# mini-swe-agent reads its settings when first imported: only after prepare_import (startup.py)
from minisweagent.exceptions import Submitted

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
"""What the first line of a command's output says when the agent submits (mini-swe-agent's prompts teach it)."""


class SandboxEnvironmentConfig(BaseModel):
    """What every command gets; the trial's working directory, mini-swe-agent's variables plus the harness's."""

    cwd: str
    env: dict[str, str] = Field(default_factory=dict)
    timeout: float = 30.0


class SandboxEnvironment:
    """Runs mini-swe-agent's actions in the trial's sandbox through a :class:`~tackroom_sandbox_kit.SyncSandbox`.

    A sandbox that fails (not a command: the sandbox itself) raises its :class:`~tackroom.SandboxError` out of
    the agent, so the trial is ``infra``; a stopped run raises :class:`~tackroom_sandbox_kit.AgentStopped`.
    """

    def __init__(self, box: SyncSandbox, *, cwd: str, env: dict[str, str], timeout: float) -> None:
        self.box = box
        self.config = SandboxEnvironmentConfig(cwd=cwd, env=env, timeout=timeout)
        self.commands = 0
        self.timeouts = 0
        self.failures = 0
        self._system: dict[str, str] | None = None

    def execute(self, action: dict, cwd: str = "", *, timeout: float | None = None) -> dict[str, Any]:
        command = action.get("command", "")
        limit = timeout or self.config.timeout
        self.commands += 1
        try:
            # One stream, in order, as the agent's own environments give it (stderr=STDOUT).
            result = self.box.exec("exec 2>&1\n" + command, cwd=cwd or self.config.cwd, env=self.config.env,
                                   timeout=limit)
        except SandboxTimeoutError as exc:
            self.timeouts += 1
            self.failures += 1
            return {"output": "", "returncode": -1,
                    "exception_info": f"The command timed out after {limit:g} seconds and was killed.",
                    "extra": {"exception_type": "TimeoutExpired", "exception": str(exc)}}
        output = result.stdout + result.stderr
        if result.truncated:
            output += "\n[the sandbox cut this output at its size limit]"
        if result.exit_code != 0:
            self.failures += 1
        observation = {"output": output, "returncode": result.exit_code, "exception_info": ""}
        lines = output.lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_MARKER and result.exit_code == 0:
            submission = "".join(lines[1:])
            raise Submitted({"role": "exit", "content": submission,
                             "extra": {"exit_status": "Submitted", "submission": submission}})
        return observation

    def system(self) -> dict[str, str]:
        """``uname``'s fields of the sandbox (what mini-swe-agent's prompt shows as system information)."""
        if self._system is None:
            names = ("system", "release", "version", "machine")
            result = self.box.exec("uname -s; uname -r; uname -v; uname -m", timeout=30)
            values = result.stdout.splitlines() if result.ok else []
            self._system = {n: (values[i].strip() if i < len(values) else "") for i, n in enumerate(names)}
        return self._system

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**self.config.model_dump(), **self.system(), **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {"info": {"config": {"environment": self.config.model_dump(mode="json"),
                                    "environment_type": f"{type(self).__module__}.{type(self).__name__}"}}}
