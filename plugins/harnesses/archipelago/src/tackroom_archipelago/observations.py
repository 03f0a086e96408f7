"""What the harness adds to tool observations: truncation, the context-budget nudge, the parse-repair notice."""

from __future__ import annotations

from collections.abc import Callable

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


def truncate(text: str, max_chars: int | None, *, head_chars: int | None = None, tail_chars: int | None = None,
             max_tokens: int | None = None, count_tokens: Callable[[str], int] | None = None) -> tuple[str, bool]:
    """Cut a long tool result to its head and tail with a marker between; (text, truncated).

    It is cut when it is over ``max_chars`` characters or over ``max_tokens`` tokens (``count_tokens``; a text
    of at most ``max_tokens`` characters is never counted). What is kept: ``head_chars`` and ``tail_chars``
    when given, else the first two thirds and the last third of ``max_chars``.
    """
    over = bool(max_chars) and len(text) > max_chars  # type: ignore[operator]
    if not over and max_tokens and count_tokens is not None and len(text) > max_tokens:
        over = count_tokens(text) > max_tokens
    if not over:
        return text, False
    budget = max_chars or (head_chars or 0) + (tail_chars or 0)
    head = head_chars if head_chars is not None else budget * 2 // 3
    tail = tail_chars if tail_chars is not None else budget - head
    if head + tail >= len(text):
        return text, False
    marker = (
        f"\n\n[TRUNCATED: the tool returned {len(text):,} characters (~{len(text) // 4:,} tokens); showing the first "
        f"{head:,} and the last {tail:,}. Ask for less (a narrower query, a page range, fewer rows).]\n\n"
    )
    return text[:head] + marker + (text[-tail:] if tail else ""), True


def nudge_text(template: str, remaining_tokens: int, context_length: int) -> str:
    pct = max(0, round(100 * remaining_tokens / context_length)) if context_length else 0
    return template.replace("{pct}", str(pct))
