"""The grading guards' own error paths (the attacks themselves run in tests/security/test_grading_attacks.py)."""

from __future__ import annotations

import pytest

from tackroom import ExecResult, GradingSabotagedError, Sandbox, SandboxSpec
from tackroom._grading import prepare_grading


class Scripted(Sandbox):
    """Answers every exec with one result: what a sandbox would print for the situation under test."""

    def __init__(self, result: ExecResult) -> None:
        super().__init__(SandboxSpec(name="scripted"))
        self.result = result
        self.commands: list = []

    async def start(self) -> None: ...

    async def exec(self, cmd, *, cwd=None, env=None, timeout=60.0, stdin=None) -> ExecResult:
        self.commands.append(cmd)
        return self.result

    async def upload(self, source, dest, *, timeout=120.0) -> None: ...

    async def download(self, source, dest, *, timeout=120.0) -> None: ...

    async def stop(self) -> None: ...


async def test_a_folder_that_cannot_be_emptied_is_sabotage():
    sb = Scripted(ExecResult(exit_code=0, stdout="NOTEMPTY /tests\n"))
    with pytest.raises(GradingSabotagedError, match="/tests so that it cannot be recreated empty"):
        await prepare_grading(sb, ["/logs/verifier", "/tests"], ["/app"])
    with pytest.raises(GradingSabotagedError, match="cannot be recreated empty"):
        await Scripted(ExecResult(exit_code=1, stderr="Read-only file system")).fresh_folder("/tests")


async def test_special_files_are_named_and_a_clean_sandbox_passes():
    with pytest.raises(GradingSabotagedError, match=r"/app/answer\.txt"):
        await prepare_grading(Scripted(ExecResult(exit_code=0, stdout="/app/answer.txt\n")), ["/tests"], ["/app"])
    clean = Scripted(ExecResult(exit_code=0))
    await prepare_grading(clean, ["/logs/verifier", "/tests"], ["/app", "/app", "/data"])
    assert clean.commands[0][4:] == ["2", "/logs/verifier", "/tests", "/app", "/data"]  # read paths deduplicated
