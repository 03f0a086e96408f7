"""Context summarisation: when a share of the window is used, the model summarises and a new sequence starts.

The summary turn is an ordinary model turn (recorded, its tokens trained on like any other). What follows it
is a fresh render of ``[system, user(task), user(handoff with the summary)]``: the model no longer sees the
earlier turns, so neither does the trainer. Each sequence is a *segment*: its turns carry ``TokenTurn.branch``
= the segment's index, and ``Trajectory.token_ids/loss_mask/logprobs`` hold the last segment (as the policy
gateway's flattened tokens hold one branch); :func:`token_segments` gives every segment as a sequence.
"""

from __future__ import annotations

from tackroom import TokenTurn

DEFAULT_SUMMARY_PROMPT = (
    "[SYSTEM NOTICE] Your context window is nearly full. Write a summary of your work so far that lets you "
    "finish the task from the summary alone: what the task asks, what you found (paths, names, numbers), what "
    "you did and changed, and what is left to do. Reply with the summary only, without a tool call."
)

HANDOFF = (
    "[CONTEXT SUMMARY] Your earlier turns were replaced by your own summary of them:\n\n{summary}\n\n"
    "Continue the task from here."
)


def handoff_text(summary: str, extra: str = "") -> str:
    text = HANDOFF.replace("{summary}", summary.strip() or "(the summary was empty)")
    return f"{text}\n\n{extra}" if extra else text


def token_segments(turns: list[TokenTurn]) -> list[tuple[list[int], list[int], list[float] | None]]:
    """Each segment's (ids, loss mask, logprobs): its last turn's prompt + completion, 1 on every completion of it.

    For a harness whose turns within a segment extend each other (this one); a segment whose turns do not is
    left out.
    """
    out = []
    for branch in sorted({t.branch for t in turns}):
        seg = [t for t in turns if t.branch == branch]
        last = seg[-1]
        ids = last.prompt_ids + last.completion_ids
        mask = [0] * len(ids)
        lps: list[float] | None = [0.0] * len(ids) if all(t.logprobs is not None for t in seg) else None
        extends = all(ids[: len(t.prompt_ids) + len(t.completion_ids)] == t.prompt_ids + t.completion_ids for t in seg)
        if not extends:
            continue
        for t in seg:
            start = len(t.prompt_ids)
            mask[start:start + len(t.completion_ids)] = [1] * len(t.completion_ids)
            if lps is not None:
                lps[start:start + len(t.completion_ids)] = t.logprobs  # type: ignore[assignment]
        out.append((ids, mask, lps))
    return out
