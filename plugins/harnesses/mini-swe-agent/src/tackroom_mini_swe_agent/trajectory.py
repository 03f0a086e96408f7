"""mini-swe-agent's message list, read into a tackroom :class:`~tackroom.Trajectory` (pure functions).

mini-swe-agent keeps a chat (system, the task, then per model call its reply and the observation as a ``user``
message) plus ``exit`` messages and an ``extra`` dict on each. Two things differ from what tackroom records:

- A reply without exactly one command (a format error) is not kept as an assistant message: mini-swe-agent adds
  only its ``user`` correction, with the reply in ``extra.model_response``. The assistant message is put back in
  front of it, because a trajectory holds one assistant message per model call, in order (the viewer and ATIF
  pair them with the gateway's recorded turns by position).
- ``exit`` messages and ``extra`` are bookkeeping, not chat: the exit status becomes ``stop_reason``.
"""

from __future__ import annotations

from typing import Any

STOP_REASONS = {
    "Submitted": "submitted",
    "LimitsExceeded": "max_turns",  # the step limit (the cost limit is off)
    "RepeatedFormatError": "format_errors",
    "TimeExceeded": "agent_timeout",
}
"""mini-swe-agent's exit statuses, as stop reasons."""
CHAT_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


def chat_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chat the model took part in: one assistant message per answered model call, observations as mini-swe-agent
    sent them, without ``exit`` messages or ``extra``."""
    chat: list[dict[str, Any]] = []
    for message in messages:
        extra = message.get("extra") or {}
        if message.get("role") == "exit":
            continue
        if message.get("role") == "user" and extra.get("interrupt_type") == "FormatError":
            chat.append({"role": "assistant", "content": extra.get("model_response") or ""})
        chat.append({k: message[k] for k in CHAT_KEYS if message.get(k) is not None})
    return chat


def exit_status(messages: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """(mini-swe-agent's exit status, its submission) from the last ``exit`` message; (None, None) without one."""
    for message in reversed(messages):
        if message.get("role") == "exit":
            extra = message.get("extra") or {}
            return extra.get("exit_status"), extra.get("submission")
    return None, None


def format_errors(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if (m.get("extra") or {}).get("interrupt_type") == "FormatError")
