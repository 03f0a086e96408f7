"""mini-swe-agent episodes against a scripted chat model (tackroom.testing's double: a real model cannot misbehave on
demand) in a real local sandbox: how each episode ends, what the trajectory holds, and who is to blame."""

from __future__ import annotations

import socket
import time

import pytest
from mini_swe_agent_fixtures import SUBMIT, command, prepared

from tackroom import Policy
from tackroom.testing import ScriptedChatServerForTests, ScriptedReply
from tackroom_agent_kit.testing import still_running
from tackroom_mini_swe_agent.errors import MiniSweAgentInfraError, MiniSweAgentModelError
from tackroom_sandbox_kit import AgentDeadlineError


def assistant_contents(trajectory) -> list[str]:
    return [m["content"] for m in trajectory.messages if m["role"] == "assistant"]


async def test_a_solved_episode_submits_and_records_every_reply_in_order(tmp_path):
    replies = ["I am not sure what to do.", command("echo done > out.txt && cat out.txt"), SUBMIT]
    async with prepared(tmp_path, max_turns=10) as (harness, task, sandbox), \
            ScriptedChatServerForTests(replies) as server:
        trajectory = await harness.run(task, sandbox, server.policy(sampling={"temperature": 0.0, "top_k": 5}))
        assert (await sandbox.read_file("/app/out.txt")).decode() == "done\n"  # cwd: the task's working directory
    assert trajectory.stop_reason == "submitted" and trajectory.final_answer is None
    # One assistant message per model call, in order: the reply without a command too, which mini-swe-agent
    # itself keeps only as the correction it sent back.
    assert assistant_contents(trajectory) == replies and len(server.requests) == 3
    roles = [m["role"] for m in trajectory.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert "EXACTLY ONE action" in trajectory.messages[3]["content"] or "Format error" in trajectory.messages[3]["content"]
    assert "<returncode>0</returncode>" in trajectory.messages[5]["content"] and "done" in trajectory.messages[5]["content"]
    assert all("extra" not in m for m in trajectory.messages)
    assert trajectory.metrics == {"turns": 3.0, "format_errors": 1.0, "commands": 2.0, "command_timeouts": 0.0,
                                  "command_failures": 0.0, "submitted": 1.0}
    first = server.requests[0]
    # litellm's `openai/` prefix is stripped: the endpoint gets the policy's model name; sampling is passed on.
    assert first["model"] == "scripted" and first["temperature"] == 0.0 and first["top_k"] == 5
    assert "max_tokens" in first
    # the prompt's system information is the sandbox's (uname there), never the harness host's environment
    assert "Linux" in first["messages"][1]["content"]
    assert any("mini-swe-agent 2.4.6" in n for n in trajectory.notes)


async def test_a_model_that_never_submits_hits_the_step_limit(tmp_path):
    async with prepared(tmp_path, max_turns=3) as (harness, task, sandbox), \
            ScriptedChatServerForTests([command("ls")]) as server:
        trajectory = await harness.run(task, sandbox, server.policy())
    assert len(server.requests) == 3 and trajectory.stop_reason == "max_turns"
    assert assistant_contents(trajectory) == [command("ls")] * 3 and trajectory.metrics["commands"] == 3


async def test_replies_without_a_command_end_the_episode_after_the_limit(tmp_path):
    async with prepared(tmp_path, max_format_errors=2) as (harness, task, sandbox), \
            ScriptedChatServerForTests(["no command", "```bash\nls\n```"]) as server:
        trajectory = await harness.run(task, sandbox, server.policy())
    assert len(server.requests) == 2 and trajectory.stop_reason == "format_errors"
    assert assistant_contents(trajectory) == ["no command", "```bash\nls\n```"]


async def test_a_command_past_its_timeout_is_killed_and_reported_to_the_model(tmp_path):
    async with prepared(tmp_path, command_timeout_sec=1) as (harness, task, sandbox), \
            ScriptedChatServerForTests([command("sleep 30"), SUBMIT]) as server:
        trajectory = await harness.run(task, sandbox, server.policy())
        assert not await still_running(sandbox, "sleep 30")
    assert "timed out after 1 seconds" in trajectory.messages[3]["content"]
    assert trajectory.metrics["command_timeouts"] == 1 and trajectory.stop_reason == "submitted"


async def test_the_deadline_stops_the_agent_and_its_command(tmp_path):
    async with prepared(tmp_path, agent_timeout_sec=6, timeout_margin_sec=1, command_timeout_sec=600) \
            as (harness, task, sandbox), ScriptedChatServerForTests([command("sleep 300")]) as server:
        started = time.monotonic()
        with pytest.raises(AgentDeadlineError) as info:
            await harness.run(task, sandbox, server.policy())
        assert time.monotonic() - started < 6  # stopped before the runtime's own timeout, so the trajectory survives
        assert not await still_running(sandbox, "sleep 300")
    assert info.value.error_class == "model" and len(server.requests) == 1
    assert info.value.trajectory.stop_reason == "agent_timeout"
    assert assistant_contents(info.value.trajectory) == [command("sleep 300")]


async def test_the_endpoint_down_is_infra(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with prepared(tmp_path, model_retries=1) as (harness, task, sandbox):
        started = time.monotonic()
        with pytest.raises(MiniSweAgentInfraError, match="policy endpoint failed after 0 model replies") as info:
            await harness.run(task, sandbox, Policy(base_url=f"http://127.0.0.1:{port}/v1", model="m"))
    assert time.monotonic() - started < 30
    assert info.value.error_class == "infra" and info.value.trajectory.stop_reason == "endpoint_failing"


async def test_a_failing_endpoint_mid_episode_is_infra_with_the_trajectory_so_far(tmp_path):
    replies = [command("ls"), ScriptedReply(status=500, error_message="engine exploded")]
    async with prepared(tmp_path, model_retries=1) as (harness, task, sandbox), \
            ScriptedChatServerForTests(replies) as server:
        with pytest.raises(MiniSweAgentInfraError, match="after 1 model replies") as info:
            await harness.run(task, sandbox, server.policy())
    assert len(server.requests) == 3  # the 500 was tried twice (model_retries = 1)
    assert assistant_contents(info.value.trajectory) == [command("ls")]


async def test_context_exhaustion_is_the_models_failure(tmp_path):
    overflow = ScriptedReply(status=400, error_code="context_length_exceeded",
                             error_message="This model's maximum context length is 4096 tokens")
    async with prepared(tmp_path) as (harness, task, sandbox), \
            ScriptedChatServerForTests([command("ls"), overflow]) as server:
        with pytest.raises(MiniSweAgentModelError, match="context_exhausted") as info:
            await harness.run(task, sandbox, server.policy())
    assert info.value.error_class == "model" and info.value.trajectory.stop_reason == "context_exhausted"
    assert len(server.requests) == 2


async def test_an_agent_crash_is_infra_before_the_first_reply_and_the_models_after(tmp_path):
    # A template that cannot render stands in for any failure inside the agent: before the first reply it can only
    # be the machinery's; after it, the model's replies drive the agent (an agent can break its own harness).
    before = {"agent": {"instance_template": "{{ no_such_variable }}"}}
    async with prepared(tmp_path, config=before) as (harness, task, sandbox), \
            ScriptedChatServerForTests([command("ls")]) as server:
        with pytest.raises(MiniSweAgentInfraError, match="UndefinedError.*before the model's first reply") as info:
            await harness.run(task, sandbox, server.policy())
    assert server.requests == [] and info.value.trajectory.stop_reason == "agent_crashed"
    after = {"model": {"observation_template": "{{ output.no_such_field.deeper }}"}}
    async with prepared(tmp_path / "2", config=after) as (harness, task, sandbox), \
            ScriptedChatServerForTests([command("ls")]) as server:
        with pytest.raises(MiniSweAgentModelError, match="after 1 model reply that drove it") as info:
            await harness.run(task, sandbox, server.policy())
    assert info.value.error_class == "model" and assistant_contents(info.value.trajectory) == [command("ls")]


def test_config_overrides_name_mini_swe_agents_sections():
    from tackroom_mini_swe_agent.harness import MiniSweAgentOptions

    with pytest.raises(ValueError, match="config sections are"):
        MiniSweAgentOptions.model_validate({"config": {"agnet": {}}})
