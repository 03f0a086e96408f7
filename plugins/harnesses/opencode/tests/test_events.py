"""OpenCode's JSON events (recorded from the real binary) → messages, metrics, failures."""

from __future__ import annotations

import json
from pathlib import Path

from tackroom_opencode.events import parse_events

DATA = Path(__file__).parent / "data"


def test_a_recorded_episode_becomes_turns_messages_and_metrics():
    episode = parse_events((DATA / "scripted-episode.jsonl").read_text())
    assert len(episode.steps) == 8 and episode.failure is None and episode.unparsed_lines == 0
    assert [s.finish_reason for s in episode.steps] == ["tool-calls"] * 7 + ["stop"]
    assert episode.final_answer == "Done: hello.txt contains hello."

    messages = episode.messages("Create hello.txt")
    assert messages[0] == {"role": "user", "content": "Create hello.txt"}
    first = messages[1]
    assert first["content"] == "I will create it.\n"
    assert json.loads(first["tool_calls"][0]["function"]["arguments"])["command"].startswith("echo hello")
    result = messages[2]
    assert result["role"] == "tool" and result["tool_call_id"] == first["tool_calls"][0]["id"]
    assert result["content"] == "hello.txt\n" and result["is_error"] is False
    errors = [m for m in messages if m["role"] == "tool" and m["is_error"]]
    assert [e["name"] for e in errors] == ["grep", "glob", "nosuchtool"]
    assert "unavailable tool" in errors[-1]["content"]

    m = episode.metrics()
    assert m["turns"] == 8 and m["tool_calls"] == 7 and m["tool_errors"] == 3
    assert m["tool_calls.bash"] == 2 and m["tool_calls.read"] == 1 and m["tool_calls.nosuchtool"] == 1
    assert m["code_call_share"] == 2 / 7
    assert m["output_tokens_per_turn"] == (50 + 35 + 30 + 42 + 50 + 37 + 30 + 9) / 8
    assert m["input_tokens_last_turn"] == 4746


def test_the_exit_code_of_a_bash_call_is_kept():
    episode = parse_events((DATA / "scripted-episode.jsonl").read_text())
    bash = [c for s in episode.steps for c in s.tool_calls if c["name"] == "bash"]
    assert [c["exit_code"] for c in bash] == [0, 3]


def test_an_error_event_is_a_failure_and_context_overflow_is_recognised():
    episode = parse_events((DATA / "context-overflow.jsonl").read_text())
    assert episode.steps == [] and episode.final_answer is None
    assert episode.failure is not None and episode.failure.name == "ContextOverflowError"
    assert episode.failure.context_exhausted and "6817 tokens" in episode.failure.message


def test_a_cut_off_stream_keeps_what_was_complete():
    lines = (DATA / "scripted-episode.jsonl").read_text().splitlines()
    text = "\n".join(lines[:3]) + "\n" + lines[3][:40] + "\nnot json at all\n"
    episode = parse_events(text)
    assert len(episode.steps) == 1 and episode.steps[0].tool_calls[0]["name"] == "bash"
    assert episode.steps[0].finish_reason is None
    assert episode.unparsed_lines == 2
    assert episode.metrics()["turns"] == 1
