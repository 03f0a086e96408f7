"""The harness conformance kit on gemini-cli: the real CLI, a scripted model behind the real gateway (Gemini dialect)."""

from __future__ import annotations

import functools

import pytest

from tackroom.testing import KIT_SOLUTION, HarnessScript, harness_self_check
from tackroom_agent_kit.testing import ScriptedGatewayForTests, tool_call
from tackroom_gemini_cli.harness import GeminiCliHarness

SCRIPT = HarnessScript(
    solve=[tool_call("run_shell_command", command=KIT_SOLUTION, description="write kit.txt"), "Wrote /app/kit.txt."],
    # The tool call's text is parsed into a functionCall by the gateway; the summary is the CLI's final response.
    recorded=[None, "Wrote /app/kit.txt."],
    idle=tool_call("run_shell_command", command="true", description="nothing"),
)


@pytest.mark.slow  # by cost: six checks, each a trial of the real Gemini CLI
async def test_conformance_on_local(smollm2_tokenizer, gemini_cli_install):
    from tackroom_local import LocalSandboxProvider

    report = await harness_self_check(
        GeminiCliHarness, sandbox=LocalSandboxProvider(), script=SCRIPT, agent_timeout_sec=120,
        model_server=functools.partial(ScriptedGatewayForTests, tokenizer=smollm2_tokenizer),
    )
    assert [r.name for r in report.results if r.passed] == list(
        ("plugin", "solves_task", "max_turns", "malformed_reply", "agent_timeout", "engine_errors"))
