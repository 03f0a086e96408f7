"""The harness conformance kit on claude-code: the real binary, a scripted model behind the real gateway (Messages)."""

from __future__ import annotations

import functools

import pytest

from tackroom.testing import KIT_SOLUTION, HarnessScript, harness_self_check
from tackroom_agent_kit.testing import ScriptedGatewayForTests, tool_call
from tackroom_claude_code.harness import ClaudeCodeHarness

SCRIPT = HarnessScript(
    solve=[tool_call("Bash", command=KIT_SOLUTION, description="write kit.txt"), "Wrote /app/kit.txt."],
    # The tool call's text is parsed into a tool_use block by the gateway; the summary is recorded as content.
    recorded=[None, "Wrote /app/kit.txt."],
    idle=tool_call("Bash", command="true", description="nothing"),
)


@pytest.mark.slow  # by cost: six checks, each a trial of the real Claude Code
async def test_conformance_on_local(smollm2_tokenizer, claude_install):
    from tackroom_local import LocalSandboxProvider

    report = await harness_self_check(
        ClaudeCodeHarness, sandbox=LocalSandboxProvider(), script=SCRIPT, agent_timeout_sec=120,
        options={"profile": "compact"},
        model_server=functools.partial(ScriptedGatewayForTests, tokenizer=smollm2_tokenizer),
    )
    assert [r.name for r in report.results if r.passed] == list(
        ("plugin", "solves_task", "max_turns", "malformed_reply", "agent_timeout", "engine_errors"))
