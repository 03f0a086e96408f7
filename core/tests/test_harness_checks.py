"""The harness conformance kit: the built-ins pass it, and it catches a harness that misbehaves."""

import json

import httpx
import pytest

import tackroom
from tackroom._builtins.nop_harness import NopHarness
from tackroom._builtins.oracle_harness import OracleHarness
from tackroom.testing import (
    KIT_SOLUTION,
    HarnessScript,
    ScriptedChatServerForTests,
    ScriptedReply,
    harness_self_check,
    run_harness_checks,
)
from tackroom_local import LocalSandboxProvider


async def test_oracle_passes_the_kit_on_local():
    report = await harness_self_check(OracleHarness, sandbox=LocalSandboxProvider())
    assert {r.name for r in report.results} == {"plugin", "solves_task", "max_turns", "malformed_reply",
                                               "agent_timeout", "engine_errors"}
    skipped = {r.name: r for r in report.skipped}
    assert set(skipped) == {"max_turns", "malformed_reply", "engine_errors"}, "the model checks cannot apply to oracle"
    assert not any(r.passed for r in skipped.values()) and "calls no model" in skipped["engine_errors"].message


async def test_nop_passes_the_kit_on_local_and_scores_zero():
    await harness_self_check(NopHarness, sandbox=LocalSandboxProvider(), expected_reward=0.0)
    report = await run_harness_checks(NopHarness, sandbox=LocalSandboxProvider(), expected_reward=1.0,
                                      skip={"agent_timeout"})
    assert [r.name for r in report.failures] == ["solves_task"], "nop must not pass a check that expects reward 1"


class NaiveChatHarness(tackroom.Harness):
    """Runs whatever shell command the model answers with, until it answers `done`: no limits, no error handling."""

    name = "naive-chat"
    capabilities = frozenset({"needs_policy"})

    class Options(tackroom.PluginOptions):
        max_turns: int = 50  # accepted, ignored: the kit must notice

    async def run(self, task, sandbox, policy):
        messages = [{"role": "user", "content": task.instruction}]
        async with httpx.AsyncClient(timeout=30) as client:
            while True:
                r = await client.post(f"{policy.base_url}/chat/completions", json={"model": policy.model, "messages": messages})
                r.raise_for_status()
                answer = json.loads(r.json()["choices"][0]["message"]["content"])
                messages.append({"role": "assistant", "content": json.dumps(answer)})
                if answer["cmd"] == "done":
                    return tackroom.Trajectory(messages=messages)
                await sandbox.exec(answer["cmd"], timeout=30)
                messages.append({"role": "user", "content": "ok"})


async def test_the_kit_catches_a_harness_without_limits_or_error_handling():
    script = HarnessScript(solve=[json.dumps({"cmd": KIT_SOLUTION}), json.dumps({"cmd": "done"})],
                           idle=json.dumps({"cmd": "true"}))
    report = await run_harness_checks(NaiveChatHarness, sandbox=LocalSandboxProvider(), script=script,
                                      skip={"agent_timeout"}, agent_timeout_sec=8, check_timeout_s=60)
    failed = {r.name: r.message for r in report.failures}
    assert set(failed) == {"max_turns", "malformed_reply", "engine_errors"}, failed
    assert "crashed the trial" in failed["malformed_reply"]
    assert "HTTPStatusError" in failed["engine_errors"] and "ConnectError" in failed["engine_errors"]
    with pytest.raises(AssertionError, match="failed 3 conformance check"):
        report.assert_ok()


async def test_scripted_server_replays_errors_delays_and_usage():
    replies = ["first", ScriptedReply(content="second", prompt_tokens=7, completion_tokens=2),
               ScriptedReply(status=400, error_code="context_length_exceeded", error_message="too long")]
    async with ScriptedChatServerForTests(replies, then="error", max_model_len=321) as server:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
            body = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
            got = [await client.post("/chat/completions", json=body) for _ in range(4)]
            models = (await client.get("/models")).json()
    assert [r.status_code for r in got] == [200, 200, 400, 500]
    assert got[0].json()["choices"][0]["message"]["content"] == "first"
    assert got[1].json()["usage"] == {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
    assert got[2].json()["error"]["code"] == "context_length_exceeded"
    assert "no reply number 4" in got[3].json()["error"]["message"]
    assert len(server.requests) == 4 and server.requests[0]["messages"][0]["content"] == "hi"
    assert models["data"][0]["max_model_len"] == 321
    assert server.policy().base_url == server.base_url
