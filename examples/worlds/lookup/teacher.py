"""A scripted teacher for the lookup family, served as an OpenAI-compatible chat endpoint.

It solves the `read`, `csv` and `log` levels the way a capable agent would, in whichever harness asks: it reads
the file the instruction names with the tools the request offers, takes the value from what the tool (or the
terminal) showed, and answers in that harness's own protocol:

- tools with a ``*read_file`` tool (archipelago): call it, then ``final_answer`` (or answer in text when no
  ``final_answer`` tool is offered);
- OpenCode's ``read`` / ``write`` tools: read the file, write the value to the answer path, then say done;
- an agent's shell tool alone (Claude Code's ``Bash``, OpenCode's ``bash``, the Gemini CLI's ``run_shell_command``,
  Codex's ``exec_command``): ``cat`` the file, then ``printf`` the value into the answer path, the commands a
  terminal harness types;
- no tools and a terminal (terminus's JSON turns): ``cat`` the file, ``printf`` the value into the answer path,
  then confirm ``task_complete``;
- no tools and a shell block protocol (mini-swe-agent): ``cat``, then write the answer and submit.

The value comes only from what the harness showed the teacher (a tool result or the terminal), never from the
task's files or tests, so a demonstration is what the policy could have done. Other levels (`mail`, `find`) get a
plain "cannot" answer, so they score 0 and `tackroom collect` keeps none of them.

    uv run python examples/worlds/lookup/teacher.py --port 8020     # then --base-url http://127.0.0.1:8020/v1

It serves ``/v1/models`` and ``/v1/chat/completions`` (plain and streamed); ``/v1/completions`` answers 404, so
harnesses that can use either pick chat.

Agents that speak another API dialect (Claude Code's Messages, the Gemini CLI's) reach a model only through the
policy gateway, which renders every dialect through the chat template and calls a token engine. For them the same
teacher is ``reply(prompt)``, a script for tackroom's scripted teacher (``tackroom collect --teacher-script
examples/worlds/lookup/teacher.py:reply``): it reads the conversation and the tools back from the rendered prompt
(Hermes markup: ``<tools>``, ``<tool_call>``, ``<tool_response>``) and answers in the same markup.
"""

from __future__ import annotations

import argparse
import json
import re
import time
import uuid
from typing import Any

PATH = re.compile(r"(/workspace/[\w./-]+\w)")
ANSWER = re.compile(r"write it to (/[\w./-]+\w)")
CODE = re.compile(r"\b[A-Z0-9]{6}\b")


def instruction_of(messages: list[dict[str, Any]]) -> str:
    """The first user message that names a file under /workspace (a harness may put its own framing first)."""
    for m in messages:
        if m.get("role") == "user" and PATH.search(text_of(m)):
            return text_of(m)
    return ""


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def value_in(instruction: str, seen: str) -> str | None:
    """The value the instruction asks for, taken from ``seen`` (the file's text as a tool or terminal showed it)."""
    if m := re.search(r"find the row of item ([\w-]+)", instruction):
        row = re.search(rf"(?<![\w-]){re.escape(m.group(1))},([A-Z0-9]+),", seen)  # a line number may lead
        return row.group(1) if row else None
    if m := re.search(r"ERROR line for user ([\w-]+)", instruction):
        line = re.search(rf"ERROR user={re.escape(m.group(1))} request=([A-Z0-9]+)", seen)
        return line.group(1) if line else None
    if "holds a secret code" in instruction:
        codes = CODE.findall(seen)
        return codes[-1] if codes else None
    return None


def tool_named(tools: list[dict[str, Any]], suffix: str) -> tuple[str, str] | None:
    """(name, first parameter) of the offered tool whose name is ``suffix`` or ends with ``_suffix``, in any case
    (Claude Code's ``Read``)."""
    for tool in tools:
        fn = tool.get("function", tool)
        name = fn.get("name", "")
        if name.lower() == suffix or name.lower().endswith("_" + suffix):
            params = fn.get("parameters", {}) or {}
            first = (params.get("required") or list((params.get("properties") or {}).keys()) or ["path"])[0]
            return name, first
    return None


SHELLS = ("bash", "run_shell_command", "exec_command", "shell")
"""The agents' shell tools, by name in any case: Claude Code, OpenCode, the Gemini CLI, Codex."""


def shell_tool(tools: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(name, the command's parameter) of the offered shell tool: its first required string parameter."""
    for tool in tools:
        fn = tool.get("function", tool)
        if fn.get("name", "").lower() in SHELLS:
            params = fn.get("parameters", {}) or {}
            props = params.get("properties") or {}
            names = [p for p in (params.get("required") or list(props)) if props.get(p, {}).get("type") == "string"]
            return fn["name"], (names or ["command"])[0]
    return None


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
         "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def say(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def next_message(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The teacher's next assistant message for this conversation."""
    instruction = instruction_of(messages)
    path, answer_path = PATH.search(instruction), ANSWER.search(instruction)
    if not instruction or not path or not _level_known(instruction):
        return say("I cannot solve this task.")
    path_s = path.group(1)
    answer_to = answer_path.group(1) if answer_path else "/app/answer.txt"
    if tools:
        return _with_tools(messages, tools, instruction, path_s, answer_to)
    return _in_a_shell(messages, instruction, path_s, answer_to)


def _level_known(instruction: str) -> bool:
    return any(k in instruction for k in ("find the row of item", "ERROR line for user", "holds a secret code"))


def _with_tools(messages, tools, instruction: str, path: str, answer_to: str) -> dict[str, Any]:
    results = [text_of(m) for m in messages if m.get("role") == "tool"]
    value = next((v for r in results if (v := value_in(instruction, r))), None)
    read = tool_named(tools, "read_file") or tool_named(tools, "read")
    if read is None and (shell := shell_tool(tools)):
        return _with_a_shell_tool(messages, shell, value, path, answer_to)
    if value is None:
        if read is None:
            return say("I cannot solve this task: no tool reads files.")
        return call(read[0], **{read[1]: path})
    if final := tool_named(tools, "final_answer"):
        return call(final[0], **{final[1]: value})
    write = tool_named(tools, "write")
    if write is not None and not any(write[0] in json.dumps(m.get("tool_calls") or []) for m in messages
                                     if m.get("role") == "assistant"):
        fn = next(t.get("function", t) for t in tools if t.get("function", t).get("name") == write[0])
        props = list((fn.get("parameters") or {}).get("properties") or {})
        path_key = next((p for p in props if "path" in p.lower()), write[1])
        content_key = next((p for p in props if p != path_key), "content")
        return call(write[0], **{path_key: answer_to, content_key: value})
    return say(value)


def _with_a_shell_tool(messages, shell: tuple[str, str], value: str | None, path: str, answer_to: str
                       ) -> dict[str, Any]:
    """One command a call: ``cat`` the named file, then ``printf`` the value it showed into the answer path."""
    name, key = shell
    if value is None:
        return call(name, **{key: f"cat {path}"})
    wrote = any("printf" in json.dumps(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")
    return say(f"The code is {value}.") if wrote else call(name, **{key: f"printf %s {value} > {answer_to}"})


def _in_a_shell(messages, instruction: str, path: str, answer_to: str) -> dict[str, Any]:
    seen = "\n".join(text_of(m) for m in messages[1:] if m.get("role") == "user")
    value = value_in(instruction, seen)
    terminus = any("keystrokes" in text_of(m) for m in messages[:2])
    if terminus:
        if value is None:
            return say(json.dumps({"analysis": "The task names a file.", "plan": "Read it.",
                                   "commands": [{"keystrokes": f"cat {path}\n", "duration": 0.5}],
                                   "task_complete": False}))
        wrote = any("printf" in text_of(m) for m in messages if m.get("role") == "assistant")
        commands = [] if wrote else [{"keystrokes": f"printf %s {value} > {answer_to}\n", "duration": 0.5}]
        return say(json.dumps({"analysis": f"The value is {value}.", "plan": "Write it to the answer file.",
                               "commands": commands, "task_complete": True}))
    fence = re.search(r"```(\w+)\s*\n\s*your_command_here", text_of(messages[0]) if messages else "")
    fence_s = fence.group(1) if fence else "bash"  # mini-swe-agent: one block a turn, in the fence its prompt shows
    if value is None:
        return say(f"THOUGHT: The task names a file; I read it.\n\n```{fence_s}\ncat {path}\n```")
    return say(f"THOUGHT: The value is {value}; I write it and submit.\n\n```{fence_s}\nprintf %s {value} > "
               f"{answer_to} && echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```")


TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|\Z)", re.S)
TOOLS = re.compile(r"<tools>\n(.*?)\n</tools>", re.S)
TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.S)
TOOL_RESPONSE = re.compile(r"<tool_response>\n?(.*?)\n?</tool_response>", re.S)


def reply(prompt: str) -> str:
    """The teacher as a scripted engine (``--teacher-script teacher.py:reply``): the next assistant turn for a
    prompt rendered in Hermes markup (SmolLM2's and Qwen's templates), in that markup."""
    tools: list[dict[str, Any]] = []
    if m := TOOLS.search(prompt):
        tools = [json.loads(line) for line in m.group(1).splitlines() if line.strip()]
    messages: list[dict[str, Any]] = []
    for role, body in TURN.findall(prompt):
        if role == "system" and "<tools>" in body:
            continue
        if role == "assistant":
            calls = [json.loads(c) for c in TOOL_CALL.findall(body)]
            messages.append({"role": "assistant", "content": TOOL_CALL.sub("", body).strip() or None,
                             "tool_calls": [{"type": "function", "function": {"name": c["name"],
                                             "arguments": json.dumps(c.get("arguments", {}))}} for c in calls]})
        elif role in ("user", "tool") and (results := TOOL_RESPONSE.findall(body)):
            messages += [{"role": "tool", "content": r} for r in results]
        elif body.strip():
            messages.append({"role": role, "content": body})
    message = next_message(messages, tools)
    text = message.get("content") or ""
    for c in message.get("tool_calls") or []:
        fn = c["function"]
        text += f'<tool_call>\n{{"name": {json.dumps(fn["name"])}, "arguments": {fn["arguments"]}}}\n</tool_call>'
    return text


def completion(body: dict[str, Any]) -> dict[str, Any]:
    message = next_message(body.get("messages") or [], body.get("tools") or [])
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:16]}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model") or "teacher",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}


def chunks(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The answer as a chat stream: the role, the content or the tool calls, then the finish reason."""
    base = {k: answer[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice, message = answer["choices"][0], answer["choices"][0]["message"]
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
    return [base | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            base | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}],
                    "usage": answer["usage"]}]


def app():
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": "teacher", "object": "model", "owned_by": "tackroom"}]})

    async def chat(request: Request):
        body = await request.json()
        answer = completion(body)
        if not body.get("stream"):
            return JSONResponse(answer)
        events = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks(answer)) + "data: [DONE]\n\n"
        return StreamingResponse(iter([events]), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/models", models), Route("/v1/chat/completions", chat, methods=["POST"])])


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8020)
    args = parser.parse_args()
    uvicorn.run(app(), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
