"""Claude Code's stream-json events (recorded from the real 2.1.332 binary) → messages, metrics, how the run ended."""

from __future__ import annotations

import json
from pathlib import Path

from tackroom_claude_code.events import parse_events

DATA = Path(__file__).parent / "data"


def test_a_recorded_episode_becomes_one_assistant_message_per_model_call():
    episode = parse_events((DATA / "scripted-episode.jsonl").read_text())
    # 7 model calls; the first and sixth replies came as several events sharing a message id
    assert [s.message_id for s in episode.steps] == [f"msg_{i}" for i in range(1, 8)]
    assert episode.result is not None and not episode.result.is_error and episode.unparsed_lines == 0
    assert episode.version == "2.1.332" and episode.tools == ["Bash", "Edit", "Read", "Write"]
    assert episode.final_answer == "Done: hello.txt contains hello."

    messages = episode.messages("Create hello.txt containing hello")
    assert messages[0] == {"role": "user", "content": "Create hello.txt containing hello"}
    assert [m["role"] for m in messages[1:4]] == ["assistant", "tool", "assistant"]
    first = messages[1]
    assert first["content"] == "I will create the file."
    (call,) = first["tool_calls"]
    assert call["function"]["name"] == "Bash" and json.loads(call["function"]["arguments"])["command"].startswith("echo hello")
    assert messages[2] == {"role": "tool", "tool_call_id": call["id"], "name": "Bash", "content": "hello.txt",
                           "is_error": False}
    sixth = [m for m in messages if m["role"] == "assistant"][5]
    assert sixth["content"] == "Checking." and [c["function"]["name"] for c in sixth["tool_calls"]] == ["Bash", "NoSuchTool"]
    errors = [m for m in messages if m["role"] == "tool" and m["is_error"]]
    assert [e["name"] for e in errors] == ["Read", "Bash", "NoSuchTool"]
    assert errors[1]["content"] == "Exit code 3\none\nthree" and "No such tool" in errors[2]["content"]

    m = episode.metrics()
    assert m["turns"] == 7 and m["tool_calls"] == 7 and m["tool_errors"] == 3
    assert m["tool_calls.Bash"] == 2 and m["tool_calls.Read"] == 2 and m["tool_calls.Write"] == 1
    assert m["code_call_share"] == 2 / 7 and m["api_retries"] == 0
    assert m["input_tokens_last_turn"] == 50 and m["output_tokens_per_turn"] == episode.result.output_tokens / 7


def test_a_prompt_too_long_is_context_exhaustion_and_claudes_notice_is_no_turn():
    episode = parse_events((DATA / "prompt-too-long.jsonl").read_text())
    assert episode.steps == [] and episode.final_answer is None
    result = episode.result
    assert result is not None and result.is_error and result.context_exhausted and result.api_error_status == 400
    assert "Prompt is too long" in result.message
    assert len(episode.notices) == 1 and "Prompt is too long" in episode.notices[0]  # the <synthetic> message


def test_a_failing_endpoint_is_retried_then_reported_with_its_status():
    episode = parse_events((DATA / "api-error-500.jsonl").read_text())
    assert episode.steps == [] and episode.api_retries == 2 and episode.last_api_error == "HTTP 500 (server_error)"
    result = episode.result
    assert result is not None and result.is_error and result.api_error_status == 500
    assert result.terminal_reason == "api_error" and not result.context_exhausted and not result.max_turns


def test_the_turn_limit_ends_the_run_after_that_many_model_calls():
    # --max-turns 3 against a model that calls a tool forever (its replies reuse one message id)
    episode = parse_events((DATA / "max-turns.jsonl").read_text())
    assert episode.result is not None and episode.result.max_turns and episode.result.is_error
    assert len(episode.steps) == 3 and all(len(s.tool_calls) == 1 for s in episode.steps)
    assert "Reached maximum number of turns (3)" in episode.result.message


def test_a_cut_off_stream_keeps_what_was_complete():
    lines = (DATA / "scripted-episode.jsonl").read_text().splitlines()
    # init, msg_1's text and tool_use, then its result cut in the middle
    text = "\n".join(lines[:3]) + "\n" + lines[3][:40] + "\nnot json at all\n"
    episode = parse_events(text)
    assert len(episode.steps) == 1 and episode.result is None and episode.unparsed_lines == 2
    (call,) = episode.steps[0].tool_calls
    assert call.name == "Bash" and call.result is None
    # a call whose result never came is an error in the transcript, not a silent success
    assert episode.messages("x")[-1]["is_error"] is True and episode.metrics()["tool_errors"] == 1


def test_subagent_events_stay_out_of_the_conversation():
    lines = (DATA / "scripted-episode.jsonl").read_text().splitlines()
    sub = json.loads(lines[1])
    sub["parent_tool_use_id"] = "toolu_x"
    sub["message"]["id"] = "msg_sub"
    episode = parse_events("\n".join([lines[0], json.dumps(sub), *lines[1:]]))
    assert episode.subagent_events == 1 and "msg_sub" not in [s.message_id for s in episode.steps]
