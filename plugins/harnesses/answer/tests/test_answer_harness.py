"""The ``answer`` harness: one chat completion, no tools, the reply written into the sandbox."""

import socket
import uuid
from pathlib import Path

import pytest

import tackroom
import tackroom_app
from tackroom import SandboxSpec, Trial
from tackroom.testing import (
    HarnessScript,
    RequestForTests,
    ResponseForTests,
    ScriptedChatServerForTests,
    ScriptedReply,
    check_plugin,
    check_registered,
    harness_self_check,
    task_for_tests,
)
from tackroom_answer import AnswerEndpointError, AnswerHarness, AnswerModelError
from tackroom_app import TrialPlugins, TrialRuntime, get_plugin_manager, instantiate
from tackroom_local import LocalSandboxProvider

SAY_BLUE = Path(__file__).resolve().parents[4] / "examples" / "train" / "overfit-tasks" / "say-blue"


def harness(**options) -> AnswerHarness:
    h = AnswerHarness(options)
    h.retry_backoff_sec = 0.01  # retries stay in the test's milliseconds
    return h


@pytest.fixture
async def sandbox(tmp_path):
    box = LocalSandboxProvider({"root_dir": str(tmp_path / "roots")}).create(
        SandboxSpec(name=f"answer-{uuid.uuid4().hex[:6]}"))
    await box.start()
    try:
        yield box
    finally:
        await box.stop()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OddAnswers(ScriptedChatServerForTests):
    """Answers HTTP 200 with whatever body the test gives (a completion without choices, …)."""

    def __init__(self, body):
        super().__init__(["unused"])
        self.body = body

    async def _chat(self, request: RequestForTests):
        self.requests.append(request.json())
        if isinstance(self.body, str):
            return ResponseForTests(body=self.body.encode(), content_type="text/plain; charset=utf-8")
        return ResponseForTests.json(self.body)


# -- registration and options ------------------------------------------------------------------------
def test_answer_is_registered_and_speaks_only_chat():
    check_plugin(AnswerHarness)
    check_registered("harness", "answer", distribution="tackroom-answer")
    entry = tackroom_app.PluginManager(env={}).entry("harness", "answer")
    assert entry.reference == "tackroom_answer.harness:AnswerHarness"
    assert AnswerHarness.capabilities == {"needs_policy", "chat"}
    # registered by reference (loading the plugins imports no httpx): what the registration says is the class's
    assert (entry.summary, entry.capabilities, entry.load()) == (AnswerHarness.summary(), AnswerHarness.capabilities,
                                                                AnswerHarness)
    # chat-only: routed through the policy gateway where one is installed (packages/app/tests/test_policy_routing.py)


def test_a_wrong_option_name_lists_the_options():
    with pytest.raises(tackroom.ConfigError) as err:
        instantiate("harness", tackroom_app.PluginSelection(name="answer", max_token=3))
    message = str(err.value)
    assert "harness.max_token: unknown field" in message
    for option in ("system", "max_tokens", "strip", "answer_path", "timeout_sec"):
        assert option in message
    built = instantiate("harness", tackroom_app.PluginSelection(name="answer", system="Be brief.", strip=False))
    assert isinstance(built, AnswerHarness) and built.options.system == "Be brief." and built.options.strip is False


# -- one call, the answer in the sandbox -------------------------------------------------------------------
async def test_the_reply_is_written_to_the_sandbox_and_recorded(sandbox):
    async with ScriptedChatServerForTests(["  blue\n"]) as server:
        traj = await harness(system="Answer with one word.").run(task_for_tests("Which colour is the sky?"), sandbox, server.policy())
    assert len(server.requests) == 1
    sent = server.requests[0]
    assert sent["messages"] == [{"role": "system", "content": "Answer with one word."},
                                {"role": "user", "content": "Which colour is the sky?"}]
    assert sent["model"] == "scripted" and sent["stream"] is False and "tools" not in sent
    assert (await sandbox.read_file("/app/answer.txt")) == b"blue"
    assert traj.messages == [*sent["messages"], {"role": "assistant", "content": "  blue\n"}]
    assert traj.final_answer == "blue" and traj.stop_reason == "completed"
    assert traj.metrics["turns"] == 1.0 and traj.metrics["assistant_tokens_per_turn"] >= 1


async def test_no_system_prompt_by_default_and_strip_off_keeps_whitespace_in_a_new_directory(sandbox):
    async with ScriptedChatServerForTests(["  blue\n"]) as server:
        traj = await harness(strip=False, answer_path="/app/out/deep/reply.txt").run(task_for_tests("Say blue."), sandbox,
                                                                                      server.policy())
    assert server.requests[0]["messages"] == [{"role": "user", "content": "Say blue."}]
    assert (await sandbox.read_file("/app/out/deep/reply.txt")) == b"  blue\n"
    assert traj.final_answer == "  blue\n"


async def test_sampling_and_max_tokens_reach_the_request_body(sandbox):
    async with ScriptedChatServerForTests(["ok"]) as server:
        policy = server.policy(sampling={"temperature": 0.3, "top_p": 0.9}, api_key="k-123")
        await harness().run(task_for_tests("x"), sandbox, policy)
        await harness(max_tokens=7).run(task_for_tests("x"), sandbox, policy)
        await harness(max_tokens=7).run(task_for_tests("x"), sandbox, server.policy(sampling={"max_tokens": 33, "temperature": 0}))
    default, option, sampled = server.requests
    assert default["temperature"] == 0.3 and default["top_p"] == 0.9 and default["max_tokens"] == 256
    assert option["max_tokens"] == 7 and option["temperature"] == 0.3
    assert sampled["max_tokens"] == 33 and sampled["temperature"] == 0  # the policy's sampling wins


async def test_a_reply_cut_at_max_tokens_stops_with_max_tokens(sandbox):
    async with ScriptedChatServerForTests([ScriptedReply(content="blu", finish_reason="length")]) as server:
        traj = await harness(max_tokens=1).run(task_for_tests("Say blue."), sandbox, server.policy())
    assert traj.stop_reason == "max_tokens" and traj.final_answer == "blu"
    assert any("max_tokens (1)" in n for n in traj.notes)
    assert (await sandbox.read_file("/app/answer.txt")) == b"blu"


# -- errors -----------------------------------------------------------------------------------------------
async def test_a_500_is_retried_then_an_infra_error(sandbox):
    replies = [ScriptedReply(status=500, error_message="engine exploded")]
    async with ScriptedChatServerForTests(replies) as server:
        with pytest.raises(AnswerEndpointError) as err:
            await harness(attempts=3).run(task_for_tests("x"), sandbox, server.policy())
    assert len(server.requests) == 3
    assert isinstance(err.value, tackroom.InfraError) and err.value.error_class == "infra"
    assert "HTTP 500" in str(err.value) and "engine exploded" in str(err.value) and "after 3 attempts" in str(err.value)


async def test_a_500_then_an_answer_succeeds(sandbox):
    async with ScriptedChatServerForTests([ScriptedReply(status=503), "blue"]) as server:
        traj = await harness().run(task_for_tests("x"), sandbox, server.policy())
    assert len(server.requests) == 2 and traj.final_answer == "blue"


async def test_a_400_is_a_model_error_with_the_asked_trajectory_attached(sandbox):
    overflow = ScriptedReply(status=400, error_code="context_length_exceeded",
                             error_message="This model's maximum context length is 4096 tokens")
    async with ScriptedChatServerForTests([overflow, ScriptedReply(status=400, error_message="bad top_p")]) as server:
        with pytest.raises(AnswerModelError) as first:
            await harness().run(task_for_tests("x"), sandbox, server.policy())
        with pytest.raises(tackroom.ModelError) as second:
            await harness().run(task_for_tests("x"), sandbox, server.policy())
    assert len(server.requests) == 2  # a 4xx is not retried
    assert first.value.error_class == "model" and "HTTP 400" in str(first.value)
    assert first.value.trajectory.stop_reason == "context_exhausted"
    assert first.value.trajectory.messages == [{"role": "user", "content": "x"}]
    assert "bad top_p" in str(second.value) and second.value.trajectory.stop_reason == "model_error"
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file("/app/answer.txt")


async def test_a_wrong_path_is_an_infra_error_naming_the_config():
    async with ScriptedChatServerForTests([ScriptedReply(status=404, error_message="no such model")]) as server:
        with pytest.raises(AnswerEndpointError, match="check \\[policy\\] base_url"):
            await harness().run(task_for_tests("x"), None, server.policy())  # type: ignore[arg-type]  fails before the sandbox


async def test_an_unreachable_url_is_an_infra_error_naming_the_url():
    url = f"http://127.0.0.1:{closed_port()}/v1"
    with pytest.raises(tackroom.InfraError) as err:
        await harness(attempts=2).run(task_for_tests("x"), None, tackroom.Policy(base_url=url, model="m"))  # type: ignore[arg-type]
    assert f"{url}/chat/completions" in str(err.value) and "ConnectError" in str(err.value)
    assert "after 2 attempts" in str(err.value) and err.value.error_class == "infra"


async def test_no_policy_is_an_infra_error():
    with pytest.raises(tackroom.InfraError, match="no policy"):
        await harness().run(task_for_tests("x"), None, None)  # type: ignore[arg-type]


@pytest.mark.parametrize("body, error, words", [
    ({"id": "c", "object": "chat.completion", "choices": []}, AnswerModelError, "no choices"),
    ({"error": "nothing here"}, AnswerModelError, "no choices"),
    ({"choices": [{"index": 0, "message": {"role": "assistant", "content": None,
                                            "tool_calls": [{"id": "t"}]}, "finish_reason": "tool_calls"}]},
     AnswerModelError, "no text content"),
    ({"choices": [{"index": 0, "finish_reason": "stop"}]}, AnswerModelError, "no text content"),
    ("<html>proxy error</html>", AnswerEndpointError, "not JSON"),
])
async def test_a_completion_without_text_is_classified(body, error, words):
    async with OddAnswers(body) as server:
        with pytest.raises(error, match=words):
            await harness().run(task_for_tests("x"), None, server.policy())  # type: ignore[arg-type]
    assert len(server.requests) == 1


async def test_content_parts_are_joined(sandbox):
    parts = {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": [
        {"type": "text", "text": "bl"}, {"type": "text", "text": "ue"}]}}]}
    async with OddAnswers(parts) as server:
        traj = await harness().run(task_for_tests("x"), sandbox, server.policy())
    assert traj.final_answer == "blue" and (await sandbox.read_file("/app/answer.txt")) == b"blue"


# -- through the trial runtime ----------------------------------------------------------------------------
async def _say_blue(tmp_path: Path, reply: str):
    task = tackroom.load_task(SAY_BLUE)
    runtime = TrialRuntime(tmp_path / "runs", attempts=1, progress=False, retry_backoff_sec=0.01)
    TestScriptVerifier = get_plugin_manager().get("verifier", "test-script")
    async with ScriptedChatServerForTests([reply]) as server:
        plugins = TrialPlugins(AnswerHarness, AnswerHarness.Options(), LocalSandboxProvider(), TestScriptVerifier,
                               TestScriptVerifier.Options(), server.policy())
        trial = Trial(task_id=task.id, task_path=str(task.path), harness="answer", sandbox="local",
                      verifier="test-script", model="scripted")
        result, traj = await runtime.run_attempt(trial, task, plugins, 1)
    assert server.requests[0]["messages"][-1]["content"] == task.instruction
    return result, traj


async def test_say_blue_scores_one_when_the_model_answers_blue_and_zero_otherwise(tmp_path):
    blue, traj = await _say_blue(tmp_path, "blue\n")
    assert blue.error is None and blue.reward == 1.0 and blue.stop_reason == "completed"
    assert traj.messages[-1] == {"role": "assistant", "content": "blue\n"}
    red, _ = await _say_blue(tmp_path, "red")
    assert red.error is None and red.reward == 0.0


async def test_answer_passes_the_harness_conformance_kit_on_local():
    # One call per episode, so every turn limit holds; the kit's turn-limit option is max_tokens here.
    script = HarnessScript(solve=["kit-ok"], idle="not yet", max_turns_option="max_tokens")
    await harness_self_check(AnswerHarness, sandbox=LocalSandboxProvider(), options={"answer_path": "/app/kit.txt"},
                             script=script, agent_timeout_sec=30, check_timeout_s=120)


async def test_without_the_gateway_tackroom_run_answer_chats_straight_to_the_endpoint(tmp_path):
    """`answer` needs no gateway: with core, itself and a sandbox (the default, tackroom-local) installed, one chat
    completion goes to the endpoint, graded as usual (the trajectory has no token ids)."""
    import asyncio
    import json
    import os
    import sys

    no_gateway = {**os.environ, "TACKROOM_LOAD_PLUGINS": "tackroom-local,tackroom-answer"}
    async with ScriptedChatServerForTests(["blue"]) as server:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tackroom_app", "run", str(SAY_BLUE), "--harness", "answer",
            "--base-url", server.base_url, "--model", "scripted", "--out", str(tmp_path / "runs"), "--json",
            env=no_gateway, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    trial = json.loads(out)["trials"][0]
    assert trial["error"] is None and trial["reward"] == 1.0
    assert server.requests[0]["messages"][-1]["content"] == tackroom.load_task(SAY_BLUE).instruction


# -- the task's [answer] path (tackroom-worlds) ------------------------------------------------------------
def _task_with(tmp_path: Path, toml: str) -> tackroom.Task:
    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "instruction.md").write_text("Say blue.")
    (folder / "task.toml").write_text(toml)
    return tackroom.load_task(folder)


async def test_the_tasks_answer_path_wins_over_the_option(sandbox, tmp_path):
    task = _task_with(tmp_path, '[answer]\npath = "/app/task/says.txt"\n')
    async with ScriptedChatServerForTests(["blue"]) as server:
        await harness(answer_path="/app/option.txt").run(task, sandbox, server.policy())
    assert (await sandbox.read_file("/app/task/says.txt")) == b"blue"
    assert not (await sandbox.exec("test -e /app/option.txt")).ok


async def test_a_wrong_answer_table_fails_before_the_model_is_asked(sandbox, tmp_path):
    task = _task_with(tmp_path, '[answer]\npath = "answer.txt"\n')
    async with ScriptedChatServerForTests(["blue"]) as server:
        with pytest.raises(tackroom.TaskError, match=r"\[answer\] path must be an absolute sandbox path"):
            await harness().run(task, sandbox, server.policy())
    assert server.requests == []
