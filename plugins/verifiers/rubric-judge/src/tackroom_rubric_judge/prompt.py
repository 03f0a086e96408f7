"""The judge prompt: task, the agent's final answer, what it changed in files, and one criterion."""

from __future__ import annotations

from typing import Any

import tackroom

DEFAULT_SYSTEM_PROMPT = """\
You grade the work of an AI agent against exactly one criterion.
Judge only from the evidence given: the task, the agent's final answer, and the changes it made to files.
Do not assume work that is not shown. A criterion holds only when the evidence clearly shows it.
Reply with a single JSON object and nothing else:
{"rationale": "<one to three sentences citing the evidence>", "passed": <true if the criterion holds, else false>}"""

REASK = """\
Your previous reply could not be used: {problem}.
Reply again with only a JSON object of the form {{"rationale": "<string>", "passed": <true or false>}}."""


def final_answer(trajectory: tackroom.Trajectory) -> str:
    """The harness's ``final_answer``, else the text of the last assistant message, else ''."""
    if trajectory.final_answer:
        return trajectory.final_answer
    for message in reversed(trajectory.messages):
        if message.get("role") != "assistant":
            continue
        content: Any = message.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if isinstance(content, str) and content.strip():
            return content
    return ""


def clip(text: str, limit: int, what: str) -> str:
    """Keep the head and the tail (answers often end with the conclusion)."""
    if len(text) <= limit:
        return text
    marker = f"\n[… {what}: {len(text) - limit} characters cut …]\n"
    keep = max(limit - len(marker), 0)
    head = keep * 2 // 3
    return text[:head] + marker + text[len(text) - (keep - head):]


def build_messages(*, instruction: str, answer: str, criterion: str, files_report: str | None,
                   system_prompt: str | None, max_answer_chars: int, max_instruction_chars: int) -> list[dict[str, str]]:
    """The chat messages for one criterion. ``files_report`` is already size-capped by the caller."""
    parts = [
        "# Task given to the agent",
        clip(instruction.strip(), max_instruction_chars, "task"),
        "",
        "# The agent's final answer",
        clip(answer.strip(), max_answer_chars, "answer") if answer.strip() else "(the agent gave no final answer)",
    ]
    if files_report is not None:
        parts += ["", "# Files the agent changed", files_report.strip() or "(no files changed)"]
    parts += ["", "# Criterion", criterion.strip(), "",
              "Does this criterion hold for the agent's work? Reply with the JSON object only."]
    return [
        {"role": "system", "content": system_prompt or DEFAULT_SYSTEM_PROMPT},
        {"role": "user", "content": "\n".join(parts)},
    ]


def reask_messages(messages: list[dict[str, str]], reply: str, problem: str) -> list[dict[str, str]]:
    """The conversation extended with the bad reply and a request for valid JSON."""
    return [*messages, {"role": "assistant", "content": reply[:2000]},
            {"role": "user", "content": REASK.format(problem=problem)}]
