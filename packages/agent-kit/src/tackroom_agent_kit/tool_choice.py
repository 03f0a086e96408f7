"""``[harness] tool_choice = "required"``: every model call an agent makes with tools must call one of them.

An agent sends its tools with each model call and lets the model choose between calling one and answering in text
(``tool_choice`` auto, or the dialect's default). A small policy often answers neither way: it writes a call the
gateway cannot parse (arguments nested in themselves, a path cut short), and the episode ends without an action.
``required`` is the fix archipelago's own ``tool_choice = "required"`` is: the relay in front of the policy sets each
call's tool choice to "a call to one of the offered tools", in the call's own dialect, and the policy gateway then
samples the call under a grammar (one Hermes-format call whose arguments follow that tool's JSON schema).

The agent cannot end a turn with text any more, so an episode ends at ``max_turns`` (or the agent's own limit): set
it to the number of calls the task needs. A call that offers no tools, or asks for none (``none``) or for one tool by
name, passes as the agent sent it.
"""

from __future__ import annotations

from typing import Any, Literal

from tackroom_agent_kit.relay import BodyFill, call_dialect

ToolChoice = Literal["auto", "required"]


def require_tool_call(path: str, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` (a model call to ``path``, any dialect) with its tool choice set to "one of the offered tools"."""
    if not doc.get("tools"):
        return doc
    dialect = call_dialect(path)
    if dialect in ("chat", "responses"):
        choice = doc.get("tool_choice")
        return doc if choice == "none" or isinstance(choice, dict) else {**doc, "tool_choice": "required"}
    if dialect == "messages":
        choice = doc.get("tool_choice") if isinstance(doc.get("tool_choice"), dict) else {}
        if choice.get("type") in ("none", "tool"):
            return doc
        kept = {k: v for k, v in choice.items() if k == "disable_parallel_tool_use"}
        return {**doc, "tool_choice": {"type": "any", **kept}}
    if dialect == "gemini":
        config = doc.get("toolConfig") if isinstance(doc.get("toolConfig"), dict) else {}
        calling = config.get("functionCallingConfig") if isinstance(config.get("functionCallingConfig"), dict) else {}
        if str(calling.get("mode") or "AUTO").upper() in ("NONE", "ANY"):
            return doc
        return {**doc, "toolConfig": {**config, "functionCallingConfig": {**calling, "mode": "ANY"}}}
    return doc


def with_tool_choice(fill: BodyFill | None, choice: ToolChoice) -> BodyFill | None:
    """The relay's fill: ``fill`` (the harness's own, or None), then :func:`require_tool_call` when ``choice`` is
    ``required``."""
    if choice != "required":
        return fill
    if fill is None:
        return require_tool_call
    return lambda path, doc: require_tool_call(path, fill(path, doc))
