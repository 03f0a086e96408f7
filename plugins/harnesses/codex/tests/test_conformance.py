"""The harness conformance kit on codex: the real binary, a scripted model behind the real (streaming) gateway."""

from __future__ import annotations

import functools

import pytest

from tackroom.testing import KIT_SOLUTION, HarnessScript, harness_self_check
from tackroom_agent_kit.testing import ScriptedGatewayForTests, tool_call
from tackroom_codex.harness import CodexHarness

SCRIPT = HarnessScript(
    solve=[tool_call("exec_command", cmd=KIT_SOLUTION), "Wrote /app/kit.txt."],
    # The tool call's text is parsed into tool_calls by the gateway; the summary is recorded as content.
    recorded=[None, "Wrote /app/kit.txt."],
    idle=tool_call("exec_command", cmd="true"),
)


@pytest.mark.slow  # by cost: six checks, each a trial of the real Codex
async def test_conformance_on_local(smollm2_tokenizer, codex_install):
    from tackroom_local import LocalSandboxProvider

    report = await harness_self_check(
        CodexHarness, sandbox=LocalSandboxProvider(), script=SCRIPT, agent_timeout_sec=120,
        model_server=functools.partial(ScriptedGatewayForTests, tokenizer=smollm2_tokenizer),
    )
    assert [r.name for r in report.results if r.passed] == list(
        ("plugin", "solves_task", "max_turns", "malformed_reply", "agent_timeout", "engine_errors")), report
