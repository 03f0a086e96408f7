"""The harness conformance kit on opencode: the real binary, a scripted model behind the real (streaming) gateway."""

from __future__ import annotations

import functools

import pytest

from tackroom.testing import KIT_SOLUTION, HarnessScript, harness_self_check
from tackroom_agent_kit.testing import ScriptedGatewayForTests, tool_call
from tackroom_opencode.harness import OpenCodeHarness

SCRIPT = HarnessScript(
    solve=[tool_call("bash", command=KIT_SOLUTION, description="write kit.txt"), "Wrote /app/kit.txt."],
    # The tool call's text is parsed into tool_calls by the gateway; the summary is recorded as content.
    recorded=[None, "Wrote /app/kit.txt."],
    idle=tool_call("bash", command="true", description="nothing"),
)


async def conforms(tokenizer, provider) -> None:
    report = await harness_self_check(
        OpenCodeHarness, sandbox=provider, script=SCRIPT, agent_timeout_sec=120,
        model_server=functools.partial(ScriptedGatewayForTests, tokenizer=tokenizer),
    )
    assert [r.name for r in report.results if r.passed] == list(
        ("plugin", "solves_task", "max_turns", "malformed_reply", "agent_timeout", "engine_errors"))


@pytest.mark.slow  # by cost: six checks, each a trial of the real OpenCode
async def test_conformance_on_local(smollm2_tokenizer, opencode_install):
    from tackroom_local import LocalSandboxProvider

    await conforms(smollm2_tokenizer, LocalSandboxProvider())


@pytest.mark.docker
async def test_conformance_on_docker(smollm2_tokenizer, opencode_install, docker_ready):
    from tackroom_docker import DockerProvider

    await conforms(smollm2_tokenizer, DockerProvider())
