"""Toolbelt mode: the model starts with meta-tools only and adds the world's tools it needs.

The meta-tools have the names Mercor's system prompt uses: ``toolbelt_list_tools``, ``toolbelt_inspect_tool``,
``toolbelt_add_tool``, ``toolbelt_remove_tool``, ``todo_write`` and ``final_answer`` (refused while a todo is
pending or in progress). A world tool is callable only while it is in the toolbelt.

Token accounting: the prompt's tool list is rendered once, with the meta-tools only, and never re-rendered.
An added tool's definition reaches the model as the text of ``toolbelt_add_tool``'s result (a tool message),
so the token sequence stays append-only on ``/v1/completions`` and through the policy gateway (whose turns
extend each other only while ``tools`` is unchanged). A context summary starts a fresh sequence, and that
render lists the meta-tools and the tools in the toolbelt then.
"""

from __future__ import annotations

import difflib
import json
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from tackroom_archipelago.tools import FINAL_ANSWER_TOOL

LIST_TOOLS, INSPECT_TOOL, ADD_TOOL, REMOVE_TOOL, TODO_WRITE = (
    "toolbelt_list_tools", "toolbelt_inspect_tool", "toolbelt_add_tool", "toolbelt_remove_tool", "todo_write")
MAX_TODOS = 100
MAX_TODO_CHARS = 2000

_NAME = {"type": "object", "properties": {"tool_name": {"type": "string"}}, "required": ["tool_name"]}


def _fn(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


META_TOOLS: list[dict[str, Any]] = [
    _fn(LIST_TOOLS, "List the tools you can add to your toolbelt, with a one-line description each.",
        {"type": "object", "properties": {}}),
    _fn(INSPECT_TOOL, "Show a tool's full description and parameters.", _NAME),
    _fn(ADD_TOOL, "Add a tool to your toolbelt; you can call it from the next turn. Returns its definition.", _NAME),
    _fn(REMOVE_TOOL, "Remove a tool from your toolbelt.", _NAME),
    _fn(TODO_WRITE, "Create or update your todo list. merge=false replaces the list; merge=true updates the todos "
        "with the given ids and adds new ones.", {
            "type": "object", "required": ["todos"], "properties": {
                "todos": {"type": "array", "items": {"type": "object", "required": ["id", "status"], "properties": {
                    "id": {"type": "string"}, "content": {"type": "string"},
                    "status": {"type": "string", "enum": ["pending", "in_progress", "completed", "cancelled"]}}}},
                "merge": {"type": "boolean"}}}),
    _fn(FINAL_ANSWER_TOOL, "Submit your final answer. Refused while a todo is pending or in progress.", {
        "type": "object", "required": ["answer"], "properties": {
            "answer": {"type": "string"},
            "status": {"type": "string", "enum": ["completed", "blocked", "failed"]}}}),
]
META_NAMES = frozenset(t["function"]["name"] for t in META_TOOLS)


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else ""


class Todo(BaseModel):
    id: str = Field(min_length=1, max_length=200)
    content: str = Field(default="", max_length=MAX_TODO_CHARS)
    status: Literal["pending", "in_progress", "completed", "cancelled"]

    @property
    def open(self) -> bool:
        return self.status in ("pending", "in_progress")


class MetaResult(BaseModel):
    """A meta-tool's answer: the text for the model, whether it succeeded, and the error kind when not."""

    text: str
    ok: bool = True
    kind: str = "ok"
    final: str | None = None
    """The accepted final answer (``final_answer`` only)."""


class Toolbelt:
    """The tools a model may add (``available``), those it has added, and its todo list."""

    def __init__(self, world_tools: list[dict[str, Any]]) -> None:
        clash = sorted(META_NAMES & {t["function"]["name"] for t in world_tools})
        if clash:
            from tackroom import TaskError

            raise TaskError(f"the world has tools named like toolbelt meta-tools ({', '.join(clash)}); "
                            "exclude them with tools_exclude or turn toolbelt off")
        self.available = {t["function"]["name"]: t for t in world_tools}
        self.added: list[str] = []
        self.todos: list[Todo] = []

    def prompt_tools(self) -> list[dict[str, Any]]:
        """What a fresh render lists: the meta-tools, then the tools in the toolbelt."""
        return META_TOOLS + [self.available[n] for n in self.added]

    def callable(self, name: str) -> bool:
        return name in META_NAMES or name in self.added

    def open_todos(self) -> list[Todo]:
        return [t for t in self.todos if t.open]

    def todo_text(self) -> str:
        if not self.todos:
            return "Your todo list is empty."
        return "Your todos:\n" + "\n".join(f"- [{t.status}] {t.id}: {t.content}" for t in self.todos)

    def refusal(self) -> str:
        items = "\n".join(f"- [{t.status}] {t.id}: {t.content}" for t in self.open_todos())
        return (f"Refused: {len(self.open_todos())} todo(s) are still open:\n{items}\n"
                "Finish them, or mark them completed or cancelled with todo_write, then give your final answer.")

    def not_added(self, name: str) -> str:
        if name in self.available:
            return f"Tool {name!r} is not in your toolbelt: add it with {ADD_TOOL} first."
        return f"Unknown tool {name!r}.{self._suggest(name)} {LIST_TOOLS} lists the tools you can add."

    def _suggest(self, name: str) -> str:
        close = difflib.get_close_matches(name, list(self.available), n=3)
        return f" Did you mean {', '.join(close)}?" if close else ""

    def handle(self, name: str, args: dict[str, Any]) -> MetaResult:
        """Run one meta-tool call; every mistake is told to the model, never raised."""
        if name == LIST_TOOLS:
            lines = [f"- {n}{' (added)' if n in self.added else ''}: {_first_line(t['function'].get('description'))}"
                     for n, t in self.available.items()]
            return MetaResult(text=f"{len(lines)} tools can be added:\n" + "\n".join(lines) if lines else "No tools.")
        if name == TODO_WRITE:
            return self._todo_write(args)
        if name == FINAL_ANSWER_TOOL:
            if self.open_todos():
                return MetaResult(text=self.refusal(), ok=False, kind="refused")
            return MetaResult(text="Final answer accepted.", final=str(args.get("answer", "")))
        tool = args.get("tool_name")
        if not isinstance(tool, str) or not tool:
            return MetaResult(text=f"{name} needs tool_name (a string).", ok=False, kind="bad_arguments")
        if tool not in self.available:
            return MetaResult(text=f"No tool named {tool!r}.{self._suggest(tool)}", ok=False, kind="unknown_tool")
        definition = json.dumps(self.available[tool]["function"], ensure_ascii=False)
        if name == INSPECT_TOOL:
            return MetaResult(text=definition)
        if name == ADD_TOOL:
            if tool in self.added:
                return MetaResult(text=f"{tool} is already in your toolbelt.")
            self.added.append(tool)
            return MetaResult(text=f"Added {tool} to your toolbelt. You can call it now. Its definition:\n{definition}")
        if tool not in self.added:
            return MetaResult(text=f"{tool} is not in your toolbelt.", ok=False, kind="not_added")
        self.added.remove(tool)
        return MetaResult(text=f"Removed {tool} from your toolbelt.")

    def _todo_write(self, args: dict[str, Any]) -> MetaResult:
        raw = args.get("todos")
        if not isinstance(raw, list):
            return MetaResult(text="todo_write needs todos: a list of {id, content, status}.", ok=False, kind="bad_arguments")
        merge = bool(args.get("merge", False))
        current = {t.id: t for t in self.todos} if merge else {}
        try:
            for item in raw:
                if not isinstance(item, dict):
                    raise ValueError(f"each todo must be an object, not {type(item).__name__}")
                old = current.get(str(item.get("id")))
                current[str(item.get("id"))] = Todo.model_validate({**(old.model_dump() if old else {}), **item})
        except (ValidationError, ValueError) as exc:
            problem = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()) \
                if isinstance(exc, ValidationError) else str(exc)
            return MetaResult(text=f"todo_write rejected (list unchanged): {problem}", ok=False, kind="bad_arguments")
        if len(current) > MAX_TODOS:
            return MetaResult(text=f"todo_write rejected: at most {MAX_TODOS} todos.", ok=False, kind="bad_arguments")
        self.todos = list(current.values())
        return MetaResult(text=self.todo_text())
