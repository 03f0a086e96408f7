"""MCP tools as OpenAI tool definitions, with single-envelope input schemas hoisted to save tokens.

Many MCP servers take one model-typed argument (``run_python(request:
CodeRequest)``). Advertising that envelope costs tokens and nests every
argument one level deeper; as the Mercor/SkyRL guide recommends, the harness
advertises the envelope's fields at the top level and wraps the model's
arguments back into ``{"request": {...}}`` when it calls the tool.
"""

from __future__ import annotations

import copy
import fnmatch
import json
from typing import Any

from mcp.types import Tool

FINAL_ANSWER_TOOL = "final_answer"


def _resolve(schema: Any, root: dict[str, Any]) -> Any:
    seen: set[str] = set()
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#/"):
        ref = schema["$ref"]
        if ref in seen:
            return schema
        seen.add(ref)
        node: Any = root
        for part in ref[2:].split("/"):
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            return schema
        schema = node
    return schema


def envelope_key(schema: dict[str, Any]) -> str | None:
    """The single required object parameter of a tool, or None when the tool is already flat."""
    props = schema.get("properties") or {}
    if len(props) != 1:
        return None
    (key, sub), = props.items()
    if key not in (schema.get("required") or []):
        return None
    inner = _resolve(sub, schema)
    if isinstance(inner, dict) and (inner.get("type") == "object" or "properties" in inner) and inner.get("properties"):
        return key
    return None


def _strip_titles(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_titles(v) for k, v in node.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(node, list):
        return [_strip_titles(v) for v in node]
    return node


def hoist(schema: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The schema the model sees and the envelope key to re-wrap with (None when nothing was hoisted)."""
    key = envelope_key(schema)
    if key is None:
        return _strip_titles(copy.deepcopy(schema)), None
    inner = copy.deepcopy(_resolve(schema["properties"][key], schema))
    flat: dict[str, Any] = {"type": "object", "properties": inner.get("properties", {})}
    if inner.get("required"):
        flat["required"] = inner["required"]
    defs = schema.get("$defs")
    if defs and "$ref" in json.dumps(flat):
        flat["$defs"] = defs
    return _strip_titles(flat), key


def openai_tools(mcp_tools: list[Tool], include: list[str] | None = None,
                 exclude: list[str] | None = None) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """OpenAI ``tools`` for the chat template and the engine, plus ``{tool: envelope key}`` for re-wrapping."""
    tools: list[dict[str, Any]] = []
    wrappers: dict[str, str] = {}
    for t in mcp_tools:
        if include and not any(fnmatch.fnmatch(t.name, p) for p in include):
            continue
        if exclude and any(fnmatch.fnmatch(t.name, p) for p in exclude):
            continue
        params, key = hoist(dict(t.input_schema or {"type": "object", "properties": {}}))
        if key is not None:
            wrappers[t.name] = key
        tools.append({"type": "function", "function": {
            "name": t.name, "description": (t.description or "").strip(), "parameters": params}})
    return tools, wrappers


def final_answer_tool() -> dict[str, Any]:
    """The harness's own tool for ending an episode when every turn must be a tool call."""
    return {"type": "function", "function": {
        "name": FINAL_ANSWER_TOOL,
        "description": "Finish the task: give your final answer. Call this only when the task is done.",
        "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
    }}


def call_arguments(name: str, arguments: str, wrappers: dict[str, str]) -> dict[str, Any]:
    """The model's JSON arguments as the MCP tool expects them (re-wrapped into its envelope when hoisted)."""
    try:
        args = json.loads(arguments) if arguments.strip() else {}
    except ValueError as exc:
        raise ValueError(f"arguments are not valid JSON: {exc}") from exc
    if not isinstance(args, dict):
        raise ValueError("arguments must be a JSON object")
    key = wrappers.get(name)
    if key is not None and not (len(args) == 1 and key in args and isinstance(args[key], dict)):
        args = {key: args}
    return args
