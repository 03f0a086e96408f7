"""The terminus episode against a scripted model (where a real one cannot misbehave on demand) on real sandboxes."""

import json
import uuid
from pathlib import Path

import pytest

import tackroom
from tackroom import SandboxSpec, TaskError
from tackroom.testing import ScriptedChatServerForTests, ScriptedReply, write_kit_task
from tackroom_app import RunConfig, run_config
from tackroom_terminus import TerminusHarness
from tackroom_terminus.chat_client import ContextExhaustedError

EXAMPLES = Path(__file__).resolve().parents[4] / "examples" / "tasks"
HELLO = tackroom.load_task(EXAMPLES / "hello-file")
SOLVE_HELLO = "echo 'Hello, tackroom!' > /app/greeting.txt\n"
FAST = {"max_command_duration_sec": 1.0, "request_retries": 0}


async def episode(sandbox, replies, max_model_len=None, task=HELLO, **options):
    """setup + run with a scripted model; returns (trajectory or the raised error, the server's requests)."""
    harness = TerminusHarness({**FAST, **options})
    await harness.setup(sandbox, task)
    async with ScriptedChatServerForTests(replies, max_model_len=max_model_len) as server:
        try:
            outcome = await harness.run(task, sandbox, server.policy())
        except tackroom.TackroomError as exc:
            outcome = exc
    return outcome, server.requests


def last_user(request):
    return request["messages"][-1]["content"]


async def test_invalid_json_is_explained_then_completion_is_confirmed(local_sandbox, turn):
    replies = ["Sure, I will create the file.", turn(SOLVE_HELLO, complete=True), turn(complete=True, analysis="done")]
    trajectory, requests = await episode(local_sandbox, replies)
    assert isinstance(trajectory, tackroom.Trajectory), trajectory
    assert "could not be used" in last_user(requests[1]) and "no JSON object" in last_user(requests[1])
    assert "Are you sure" in last_user(requests[2]) and "New terminal output" in last_user(requests[2])
    assert trajectory.stop_reason == "completed" and trajectory.final_answer == "done"
    m = trajectory.metrics
    assert (m["turns"], m["parse_failures"], m["commands_sent"]) == (3, 1, 1)
    assert m["model_time_s"] > 0 and m["sandbox_time_s"] > 0 and m["wait_time_s"] >= 0.2
    assert (await local_sandbox.read_file("/app/greeting.txt")) == b"Hello, tackroom!\n"
    # The trajectory is the conversation the model saw, ending with its last answer.
    assert trajectory.messages[:2] == requests[0]["messages"] and trajectory.messages[-1]["content"] == replies[-1]
    assert trajectory.messages[:-1] == requests[-1]["messages"]
    assert requests[0]["max_tokens"] == 1024 and "response_format" not in requests[0]


async def test_invalid_answers_in_a_row_end_the_episode_as_a_model_error(local_sandbox):
    replies = ["nope", '{"commands": 3}', ScriptedReply(content='{"analysis": "long', finish_reason="length")]
    error, requests = await episode(local_sandbox, replies, max_parse_retries=2)
    assert isinstance(error, tackroom.ModelError) and error.error_class == "model"
    assert "3 invalid answers in a row" in str(error) and "structured_outputs" in str(error)
    assert len(requests) == 3
    assert "'commands' must be a list" in last_user(requests[2])
    assert error.trajectory.stop_reason == "invalid_replies" and error.trajectory.metrics["parse_failures"] == 3
    assert error.trajectory.messages[-1] == {"role": "assistant", "content": '{"analysis": "long'}


async def test_a_reply_cut_at_max_tokens_is_told_so(local_sandbox, turn):
    replies = [ScriptedReply(content='{"analysis": "I think', finish_reason="length"), turn(complete=True), turn(complete=True)]
    trajectory, requests = await episode(local_sandbox, replies)
    assert "cut off at the per-turn token limit" in last_user(requests[1])
    assert trajectory.stop_reason == "completed"


async def test_context_budget_ends_the_episode_before_the_context_overflows(local_sandbox, turn):
    replies = [ScriptedReply(content=turn("ls\n"), prompt_tokens=850, completion_tokens=40)]
    error, requests = await episode(local_sandbox, replies, max_tokens=128, max_model_len=1000)
    assert isinstance(error, ContextExhaustedError) and error.error_class == "model"
    assert len(requests) == 1, "the request that could not fit was never sent"
    assert "1000-token context" in str(error)
    t = error.trajectory
    assert t.stop_reason == "context_exhausted" and t.metrics["context_tokens_last"] == 890
    assert t.messages[-1]["role"] == "assistant", "messages end with what the model last saw and said"


async def test_context_rejection_by_the_engine_is_a_model_error(local_sandbox):
    overflow = ScriptedReply(status=400, error_code="context_length_exceeded", error_message="prompt is too long")
    error, _ = await episode(local_sandbox, [overflow])
    assert isinstance(error, ContextExhaustedError) and error.trajectory.stop_reason == "context_exhausted"


async def test_it_ends_itself_before_the_agent_timeout_and_the_trial_keeps_its_trajectory(turn, tmp_path):
    replies = [turn("echo working\n"), ScriptedReply(content=turn(), delay_s=60)]
    async with ScriptedChatServerForTests(replies) as server:
        cfg = RunConfig.model_validate({
            "tasks": [str(write_kit_task(tmp_path, agent_timeout_sec=8))],
            "harness": {"name": "terminus", **FAST, "finish_before_timeout_sec": 3},
            "policy": {"base_url": server.base_url, "model": "scripted", "gateway": False},
            "runtime": {"out": str(tmp_path / "runs"), "attempts": 1},
        })
        run_dir, results, _ = await run_config(cfg, progress=False, run_id="deadline")
    result = results[0]
    assert result.error.error_class == "model" and result.error.type == "AgentTimeBudgetError", result.error
    assert "3s before the task's 8s agent timeout" in result.error.message
    assert 4.5 < result.timings["harness_run"] < 7.5, "the deadline is 8 - 3 = 5 s into the episode"
    assert result.stop_reason == "agent_timeout" and result.reward == 0.0
    assert result.metrics["turns"] == 2 and result.metrics["commands_sent"] == 1, "the metrics survive the timeout"
    saved = json.loads((run_dir / result.trial_id / "trajectory.json").read_text())
    assert saved["messages"][-1]["content"] == replies[0], "the unanswered request is not in the messages"
    assert len(server.requests) == 2


async def test_unconfirmed_completion_goes_on_and_max_turns_stops_cleanly(local_sandbox, turn):
    replies = [turn(complete=True), turn("echo not-yet\n"), turn()]
    trajectory, requests = await episode(local_sandbox, replies, max_turns=4)
    assert "Are you sure" in last_user(requests[1]) and "Are you sure" not in last_user(requests[2])
    assert trajectory.stop_reason == "max_turns" and len(requests) == 4
    assert any("max_turns = 4" in n for n in trajectory.notes)


async def test_the_shell_exiting_starts_a_new_session(local_sandbox, turn):
    replies = [turn("exit\n"), turn("echo back-again\n"), turn(complete=True), turn(complete=True)]
    trajectory, requests = await episode(local_sandbox, replies)
    assert trajectory.stop_reason == "completed"
    assert "a new terminal session was started" in last_user(requests[1])
    assert "back-again" in last_user(requests[2])
    assert any("shell exited" in n for n in trajectory.notes)


async def test_structured_outputs_send_the_schema(local_sandbox, turn):
    _, requests = await episode(local_sandbox, [turn(complete=True)], structured_outputs=True, structured_max_chars=50,
                                structured_max_commands=2, max_tokens=200, temperature=0.0)
    fmt = requests[0]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"]["properties"]["plan"]["maxLength"] == 50
    assert requests[0]["max_tokens"] == 200 and requests[0]["temperature"] == 0.0


async def test_a_scripted_solution_scores_one_through_tackroom_run(tmp_path, turn):
    async with ScriptedChatServerForTests([turn(SOLVE_HELLO, complete=True), turn(complete=True)]) as server:
        cfg = RunConfig.model_validate({
            "tasks": [str(EXAMPLES / "hello-file")], "harness": {"name": "terminus", **FAST},
            "policy": {"base_url": server.base_url, "model": "scripted", "gateway": False},
            "runtime": {"out": str(tmp_path), "attempts": 1},
        })
        run_dir, results, _ = await run_config(cfg, progress=False, run_id="scripted")
    result = results[0]
    assert result.error is None and result.reward == 1.0 and result.stop_reason == "completed"
    assert result.metrics["turns"] == 2 and result.metrics["commands_sent"] == 1
    saved = json.loads((run_dir / result.trial_id / "trajectory.json").read_text())
    assert saved["messages"][-1]["content"] == turn(complete=True)


async def test_without_a_policy_it_says_what_to_set(local_sandbox):
    harness = TerminusHarness(FAST)
    await harness.setup(local_sandbox, HELLO)
    with pytest.raises(tackroom.ConfigError, match="base_url"):
        await harness.run(HELLO, local_sandbox, None)


@pytest.mark.docker
async def test_an_image_without_tmux_fails_setup_as_a_task_error_when_install_is_off(docker_provider):
    sandbox = docker_provider.create(SandboxSpec(name=f"terminus-{uuid.uuid4().hex[:8]}"))
    await sandbox.start()
    try:
        with pytest.raises(TaskError, match="tmux is not installed") as info:
            await TerminusHarness({"tmux_install": "never"}).setup(sandbox, HELLO)
        assert "apt-get install -y tmux" in str(info.value) and info.value.error_class == "task"
    finally:
        await sandbox.stop()
