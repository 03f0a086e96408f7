"""The harness conformance kit on mini-swe-agent: its own agent loop, a scripted chat model, the local sandbox."""

from __future__ import annotations

import pytest
from mini_swe_agent_fixtures import SUBMIT, command

from tackroom.testing import KIT_SOLUTION, HarnessScript, check_registered, harness_self_check
from tackroom_local import LocalSandboxProvider
from tackroom_mini_swe_agent.harness import MiniSweAgentHarness

SCRIPT = HarnessScript(solve=[command(KIT_SOLUTION), SUBMIT], idle=command("true"))


@pytest.mark.slow  # by cost: six checks, each a trial in a local sandbox
async def test_conformance_on_local():
    report = await harness_self_check(MiniSweAgentHarness, sandbox=LocalSandboxProvider(), script=SCRIPT,
                                      agent_timeout_sec=60)
    assert [r.name for r in report.results if r.passed] == [
        "plugin", "solves_task", "max_turns", "malformed_reply", "agent_timeout", "engine_errors"]


def test_registered_under_its_entry_point():
    check_registered("harness", "mini-swe-agent", distribution="tackroom-mini-swe-agent")
