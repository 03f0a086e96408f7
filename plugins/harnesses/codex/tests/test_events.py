"""`codex exec --json` events → steps (one per model call), messages and metrics; the stream shapes are what the
real 0.171.0 binary wrote in test_failures.py's runs."""

from __future__ import annotations

import json

from tackroom_codex.events import parse_events, shell_command


def lines(*events: dict) -> str:
    return "\n".join(json.dumps(e) for e in events) + "\n"


def cmd(item_id: str, command: str, output: str = "", code: int | None = 0, status: str = "completed") -> dict:
    return {"type": "item.completed", "item": {"id": item_id, "type": "command_execution", "command": command,
                                               "aggregated_output": output, "exit_code": code, "status": status}}


def said(item_id: str, text: str, kind: str = "agent_message") -> dict:
    return {"type": "item.completed", "item": {"id": item_id, "type": kind, "text": text}}


def test_items_group_into_one_step_per_model_reply():
    episode = parse_events(lines(
        {"type": "thread.started", "thread_id": "t1"}, {"type": "turn.started"},
        said("i0", "Let me look.", "reasoning"), said("i1", "Listing files."), cmd("i2", "/bin/bash -c 'ls -la'", "a\n"),
        cmd("i3", "/bin/bash -c 'false'", "", 1),  # a second call with no text between: the next model reply
        said("i4", "Done."),
        {"type": "turn.completed", "usage": {"input_tokens": 300, "output_tokens": 30}},
    ))
    assert [(len(s.tool_calls), s.text) for s in episode.steps] == [(1, "Listing files."), (1, ""), (0, "Done.")]
    assert episode.steps[0].reasoning == "Let me look." and episode.thread_id == "t1"
    roles = [m["role"] for m in episode.messages("task")]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    call = episode.messages("task")[1]["tool_calls"][0]["function"]
    assert call == {"name": "exec_command", "arguments": json.dumps({"cmd": "ls -la"})}
    assert episode.messages("task")[4]["is_error"] is True  # exit 1
    m = episode.metrics()
    assert (m["turns"], m["tool_calls"], m["tool_errors"], m["code_call_share"]) == (3, 2, 1, 1.0)
    assert m["output_tokens_per_turn"] == 10 and episode.final_answer == "Done." and episode.failure is None


def test_a_command_cut_off_by_the_stop_is_an_error_call():
    started = {"type": "item.started", "item": {"id": "i1", "type": "command_execution",
                                                "command": "/bin/bash -c 'sleep 300'", "status": "in_progress"}}
    episode = parse_events(lines(started))
    (step,) = episode.steps
    assert step.tool_calls[0].status == "in_progress" and step.tool_calls[0].is_error
    done = parse_events(lines(started, cmd("i1", "/bin/bash -c 'sleep 300'", "ok")))
    assert len(done.steps) == 1 and done.steps[0].tool_calls[0].result == "ok"


def test_failures_warnings_and_reconnects():
    context = parse_events(lines({"type": "turn.started"}, {"type": "turn.failed", "error": {
        "message": "unexpected status 400 Bad Request: This model's maximum context length is 4096 tokens"}}))
    assert context.failure.context_exhausted and context.failure.status_code == 400
    recovered = parse_events(lines({"type": "error", "message": "Reconnecting... 1/1"}, said("i", "Hi."),
                                   {"type": "turn.completed", "usage": {}}))
    assert recovered.failure is None and recovered.warnings == ["Reconnecting... 1/1"]
    broken = parse_events(lines({"type": "error", "message": "stream disconnected"}) + "{cut off")
    assert broken.failure.message == "stream disconnected" and broken.unparsed_lines == 1
    warned = parse_events(lines({"type": "item.completed", "item": {"id": "e", "type": "error", "message": "w"}}))
    assert warned.warnings == ["w"] and warned.steps == []


def test_the_model_command_is_unwrapped_from_codexs_shell():
    assert shell_command("/bin/bash -c 'echo \"a b\" > f'") == 'echo "a b" > f'
    assert shell_command(["/bin/bash", "-lc", "ls"]) == "ls"
    assert shell_command("python3 x.py") == "python3 x.py"
