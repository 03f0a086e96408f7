"""What the harness adds to tool observations: truncation, the context-budget nudge, the parse-repair notice."""

from __future__ import annotations

DEFAULT_TOOL_RESULT_MAX_CHARS = 48_000
"""The guide's fair share of context per tool call (32K head + 16K tail)."""

DEFAULT_NUDGE = (
    "[SYSTEM NOTICE] Only about {pct}% of your context window is left. Make as few further tool calls as "
    "possible and give your final answer soon."
)

REPAIR_NOTICE = (
    "Your last message contained a <tool_call> block that could not be parsed as a tool call. If you meant to "
    "call a tool, send the call again in exactly the required format. If you meant to finish, reply with your "
    "final answer and no <tool_call> block."
)


def truncate(text: str, max_chars: int | None) -> tuple[str, bool]:
    """Keep the first two thirds and the last third of ``max_chars`` with a marker between; (text, truncated)."""
    if max_chars is None or len(text) <= max_chars:
        return text, False
    head = max_chars * 2 // 3
    tail = max_chars - head
    marker = (
        f"\n\n[TRUNCATED: the tool returned {len(text):,} characters (~{len(text) // 4:,} tokens); showing the first "
        f"{head:,} and the last {tail:,}. Ask for less (a narrower query, a page range, fewer rows).]\n\n"
    )
    return text[:head] + marker + (text[-tail:] if tail else ""), True


def nudge_text(template: str, remaining_tokens: int, context_length: int) -> str:
    pct = max(0, round(100 * remaining_tokens / context_length)) if context_length else 0
    return template.replace("{pct}", str(pct))
