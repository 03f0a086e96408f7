"""The lookup family's scripted teacher (examples/worlds/lookup/teacher.py): in each harness's protocol it reads
the file the instruction names, then answers with the value it was shown, and never with a value it was not."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import httpx
import pytest

TEACHER = Path(__file__).resolve().parents[1] / "examples" / "worlds" / "lookup" / "teacher.py"
CSV = ("The file /workspace/inventory.csv lists items with their codes (columns item,code,qty). Read it and find the "
       "row of item zinc-bracket-01. Answer with the code only, nothing else (write it to /app/answer.txt).")
SHOWN = "1: item,code,qty\n2: glass-panel-x1,TTK0QI,5\n3: zinc-bracket-01,YN1B7O,481\n"


def load():
    spec = importlib.util.spec_from_file_location("lookup_teacher", TEACHER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


teacher = load()


def tool(name: str, *params: str) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {p: {"type": "string"} for p in params}, "required": list(params)}}}


def args(message: dict) -> tuple[str, dict]:
    fn = message["tool_calls"][0]["function"]
    return fn["name"], json.loads(fn["arguments"])


def test_archipelago_reads_then_calls_final_answer_with_the_value_shown():
    tools = [tool("files_read_file", "path"), tool("final_answer", "answer")]
    first = teacher.next_message([{"role": "user", "content": CSV}], tools)
    assert args(first) == ("files_read_file", {"path": "/workspace/inventory.csv"})
    second = teacher.next_message([{"role": "user", "content": CSV}, first,
                                   {"role": "tool", "content": SHOWN}], tools)
    assert args(second) == ("final_answer", {"answer": "YN1B7O"})


def test_opencode_writes_the_value_to_the_answer_path_then_says_it():
    tools = [tool("read", "filePath"), tool("write", "content", "filePath"), tool("bash", "command")]
    history = [{"role": "user", "content": CSV}]
    history.append(teacher.next_message(history, tools))
    assert args(history[-1]) == ("read", {"filePath": "/workspace/inventory.csv"})
    history.append({"role": "tool", "content": SHOWN})
    history.append(teacher.next_message(history, tools))
    assert args(history[-1]) == ("write", {"filePath": "/app/answer.txt", "content": "YN1B7O"})
    history.append({"role": "tool", "content": "Wrote file successfully."})
    assert teacher.next_message(history, tools) == {"role": "assistant", "content": "YN1B7O"}


@pytest.mark.parametrize(("shell", "key", "shown"), [
    ("Bash", "command", SHOWN),                                                                     # Claude Code
    ("bash", "command", SHOWN),                                                                     # OpenCode
    ("run_shell_command", "command", f"Output: {SHOWN}Process Group PGID: 106"),                    # the Gemini CLI
    ("exec_command", "cmd", f"Chunk ID: 871074\nProcess exited with code 0\nOutput:\n{SHOWN}"),     # Codex
])
def test_an_agent_with_its_shell_tool_alone_cats_the_file_then_printfs_the_value(shell, key, shown):
    """The command parameter is the tool's first required string (Codex's ``cmd``), never a number listed before it; the
    value is the one the command showed, in the agent's framing of a command's output; then it says it is done."""
    offered = [tool(shell, key, "description")]
    offered[0]["function"]["parameters"]["properties"]["timeout"] = {"type": "number"}
    offered[0]["function"]["parameters"]["required"].insert(0, "timeout")
    if shell == "exec_command":
        offered.append(tool("write_stdin", "chars"))
    history = [{"role": "user", "content": CSV}]
    history.append(teacher.next_message(history, offered))
    assert args(history[-1]) == (shell, {key: "cat /workspace/inventory.csv"})
    history.append({"role": "tool", "content": shown})
    history.append(teacher.next_message(history, offered))
    assert args(history[-1]) == (shell, {key: "printf %s YN1B7O > /app/answer.txt"})
    history.append({"role": "tool", "content": ""})
    assert teacher.next_message(history, offered) == {"role": "assistant", "content": "The code is YN1B7O."}


def test_terminus_cats_the_file_writes_the_value_and_confirms():
    history = [{"role": "system", "content": 'answer {"keystrokes": "ls -la\\n"}'}, {"role": "user", "content": CSV}]
    turn = json.loads(teacher.next_message(history, [])["content"])
    assert turn["commands"][0]["keystrokes"] == "cat /workspace/inventory.csv\n" and not turn["task_complete"]
    history += [{"role": "assistant", "content": json.dumps(turn)}, {"role": "user", "content": SHOWN}]
    turn = json.loads(teacher.next_message(history, [])["content"])
    assert turn["commands"][0]["keystrokes"] == "printf %s YN1B7O > /app/answer.txt\n" and turn["task_complete"]
    history += [{"role": "assistant", "content": json.dumps(turn)}, {"role": "user", "content": "Are you sure?"}]
    turn = json.loads(teacher.next_message(history, [])["content"])
    assert turn["commands"] == [] and turn["task_complete"]


def test_mini_swe_agent_uses_the_fence_its_prompt_shows():
    system = "Format:\n```mswea_bash_command\nyour_command_here\n```"
    history = [{"role": "system", "content": system}, {"role": "user", "content": CSV}]
    assert "```mswea_bash_command\ncat /workspace/inventory.csv\n```" in teacher.next_message(history, [])["content"]
    history += [{"role": "assistant", "content": "..."}, {"role": "user", "content": SHOWN}]
    last = teacher.next_message(history, [])["content"]
    assert "printf %s YN1B7O > /app/answer.txt && echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in last


@pytest.mark.parametrize("shown", ["(empty)", "1: item,code,qty\n2: zinc-bracket-010,AAAAAA,1\n"])
def test_a_value_it_was_not_shown_is_never_answered(shown):
    """A tool result without the row (or with a longer item name that contains it) gets another read, not a guess."""
    tools = [tool("files_read_file", "path"), tool("final_answer", "answer")]
    again = teacher.next_message([{"role": "user", "content": CSV}, {"role": "tool", "content": shown}], tools)
    assert args(again)[0] == "files_read_file"


def test_levels_it_cannot_solve_get_a_plain_refusal():
    mail = "The folder /workspace/mail/ holds mails. The mail from Ana Ruiz gives an access code."
    assert teacher.next_message([{"role": "user", "content": mail}], [])["content"].startswith("I cannot")


async def test_it_serves_chat_completions_plain_and_streamed_and_no_completions():
    transport = httpx.ASGITransport(app=teacher.app())
    async with httpx.AsyncClient(transport=transport, base_url="http://teacher") as client:
        assert (await client.get("/v1/models")).json()["data"][0]["id"] == "teacher"
        body = {"model": "teacher", "messages": [{"role": "user", "content": CSV}],
                "tools": [tool("files_read_file", "path")]}
        plain = (await client.post("/v1/chat/completions", json=body)).json()
        assert plain["choices"][0]["finish_reason"] == "tool_calls"
        streamed = (await client.post("/v1/chat/completions", json=body | {"stream": True})).text
        events = [json.loads(line[6:]) for line in streamed.splitlines() if line.startswith("data: {")]
        assert events[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "files_read_file"
        assert streamed.rstrip().endswith("data: [DONE]")
        assert (await client.post("/v1/completions", json={})).status_code in (404, 405)


@pytest.mark.parametrize("tokenizer", ["smollm2", "qwen3"])
def test_as_a_scripted_engine_it_reads_the_conversation_back_from_the_rendered_prompt(tokenizer):
    """``reply(prompt)``: Claude Code's Read/Write (names in another case, ``file_path``) through the chat template
    the gateway renders every dialect with; the tool result is read from ``<tool_response>``, and the write's value
    is the one shown there, never one from the instruction or the tools' text."""
    from tackroom_gateway import ChatTemplate, load_tokenizer

    template = ChatTemplate(load_tokenizer(tokenizer))
    tools = [tool("Read", "file_path"), tool("Write", "file_path", "content")]
    tools[0]["function"]["description"] = "Reads a file. Example code: ZZZZZZ"
    history = [{"role": "system", "content": "You are Claude Code."}, {"role": "user", "content": CSV}]

    def next_turn() -> tuple[str, dict]:
        text = teacher.reply(template.render(history, tools=tools))
        call = json.loads(text.split("<tool_call>\n", 1)[1].split("\n</tool_call>", 1)[0])
        history.append({"role": "assistant", "content": None, "tool_calls": [{"id": f"c{len(history)}", "type": "function",
                        "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}]})
        return call["name"], call["arguments"]

    assert next_turn() == ("Read", {"file_path": "/workspace/inventory.csv"})
    history.append({"role": "tool", "tool_call_id": "c2", "content": SHOWN})
    assert next_turn() == ("Write", {"file_path": "/app/answer.txt", "content": "YN1B7O"})
    history.append({"role": "tool", "tool_call_id": "c3", "content": "File created successfully at: /app/answer.txt"})
    assert teacher.reply(template.render(history, tools=tools)) == "YN1B7O"
