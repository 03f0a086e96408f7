"""From a kept trial to demonstrations: the recorded ids copied, or the conversation re-rendered.

Which, per trial (:func:`convert_trial`):

- **copied** when the teacher's episode was recorded in the policy's own tokenizer: by the policy gateway (a chat
  harness routed through it, ``[policy] tokenizer`` the policy's), or by a harness with its own token accounting
  (``token_ids``) rendering with the policy's tokenizer. One demonstration per branch of the recorded session,
  flattened as the gateway flattens a trajectory: the branch's newest call's prompt and completion, mask 1 on
  the completion ids of every call in its lineage (a later call's prompt starts with the earlier call's prompt
  and completion; that is checked, and every id must be in the policy's vocabulary);
- **re-rendered** otherwise (:mod:`tackroom_train.collect.rendering`): each branch's conversation from the record
  of the requests (the gateway's, or, without a gateway, the recording proxy's: the request's messages with the
  replies as the teacher gave them, and the tools the harness sent), or, failing both, the harness's transcript;
  ``rerendered=True``. A transcript says nothing about the tools the harness declared, so one with tool calls is
  skipped with the reason.

Token ids never come from a transcript's text or fields: only from a recorder's ids or the policy's template.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tackroom import Trajectory
from tackroom_train.collect.recording import EngineCall, calls_from_turns
from tackroom_train.collect.rendering import RenderError, render_conversation
from tackroom_train.demonstrations import Demonstration

Routing = Literal["gateway", "token_ids", "direct"]
"""How a harness reached the teacher: through the policy gateway, with its own token ids, or straight (text)."""


@dataclass(frozen=True)
class PolicySide:
    """What demonstrations are made in: the policy's tokenizer (name as configured) and its chat template."""

    tokenizer: str
    template: Any
    vocab_size: int
    split: str = "train"


@dataclass
class Conversion:
    """A trial's demonstrations, how they were made (``recorded``/``rerendered``) or why there are none."""

    demonstrations: list[Demonstration] = field(default_factory=list)
    how: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class TrialEpisode:
    """What one kept trial left: where it ran, its reward, its trajectory and the trusted record, if any."""

    task_id: str
    harness: str
    reward: float
    source: str
    trajectory: Trajectory
    routing: Routing
    same_tokenizer: bool
    """Whether the teacher's ids are in the policy's tokenizer (the recorder rendered with it)."""
    record: list[EngineCall] | None = None
    """The requests as recorded: by the gateway (routing ``gateway``: ids, messages, tools) or by the recording
    proxy (otherwise: messages and tools, no ids); None when nothing could be read."""


def convert_trial(episode: TrialEpisode, policy: PolicySide) -> Conversion:
    """The demonstrations of one kept trial (see the module docstring)."""
    record = episode.record
    try:
        if episode.routing == "token_ids" and episode.same_tokenizer:
            own = calls_from_turns(episode.trajectory.turns)
            if own:
                return _made(episode, policy, "recorded", [(b, *flatten_branch(own, b)) for b in _branches(own)])
        if episode.routing == "gateway" and record == []:
            return Conversion(reason="the harness made no call to the teacher (no turn was recorded)")
        if record and episode.routing == "gateway" and episode.same_tokenizer:
            return _made(episode, policy, "recorded", [(b, *flatten_branch(record, b)) for b in _branches(record)])
        if record:
            return _made(episode, policy, "rerendered", _rerendered_branches(record, policy))
        return _made(episode, policy, "rerendered", [(0, *_rerendered_transcript(episode.trajectory, policy))])
    except RenderError as exc:
        return Conversion(reason=str(exc))


def _made(episode: TrialEpisode, policy: PolicySide, how: str,
          branches: list[tuple[int, list[int], list[int]]]) -> Conversion:
    rows = []
    for branch, ids, mask in branches:
        if not any(mask):
            continue
        bad = next((i for i in ids if not 0 <= i < policy.vocab_size), None)
        if bad is not None:
            raise RenderError(f"token id {bad} is outside the policy tokenizer's vocabulary ({policy.vocab_size}): "
                              "the teacher's ids are not in the policy's tokenizer")
        rows.append(Demonstration(task_id=episode.task_id, harness=episode.harness, reward=episode.reward,
                                  input_ids=ids, loss_mask=mask, tokenizer=policy.tokenizer, source=episode.source,
                                  branch=branch, rerendered=how == "rerendered", split=policy.split))
    if not rows:
        return Conversion(reason="no assistant tokens in the recorded episode: nothing to learn")
    return Conversion(demonstrations=rows, how=how)


def _branches(calls: list[EngineCall]) -> list[int]:
    return sorted({c.branch for c in calls})


def lineage(calls: list[EngineCall], branch: int) -> list[EngineCall]:
    """The calls from the first to the newest one of ``branch``, parents first."""
    by_index = {c.index: c for c in calls}
    at: EngineCall | None = max((c for c in calls if c.branch == branch), key=lambda c: c.index)
    chain: list[EngineCall] = []
    while at is not None:
        if any(c.index == at.index for c in chain):
            raise RenderError("the recorded calls' parents form a cycle")
        chain.append(at)
        at = by_index.get(at.parent) if at.parent is not None else None
    return chain[::-1]


def flatten_branch(calls: list[EngineCall], branch: int) -> tuple[list[int], list[int]]:
    """``(ids, mask)`` of one branch: its newest call's prompt and completion, mask 1 on the completion ids of
    every call in its lineage; :class:`RenderError` when a call's prompt does not extend its parent's."""
    chain = lineage(calls, branch)
    tip = chain[-1]
    ids = tip.prompt_ids + tip.completion_ids
    mask = [0] * len(ids)
    for call in chain:
        start, end = len(call.prompt_ids), len(call.prompt_ids) + len(call.completion_ids)
        if ids[:end] != call.prompt_ids + call.completion_ids:
            raise RenderError(f"recorded call {call.index} is not a prefix of branch {branch}'s newest call: "
                              "the record is inconsistent")
        mask[start:end] = [1] * (end - start)
    return ids, mask


def _rerendered_branches(calls: list[EngineCall], policy: PolicySide) -> list[tuple[int, list[int], list[int]]]:
    """Each branch's conversation from the gateway's record, re-rendered in the policy's template."""
    out = []
    for branch in _branches(calls):
        chain = lineage(calls, branch)
        tip = chain[-1]
        messages = [*(tip.messages or []), tip.reply or {}]
        replies = set()
        for call in chain:  # the replies as the gateway gave them, not as the client sent them back
            at = len(call.messages or [])
            if at < len(messages) and call.reply is not None:
                messages[at] = call.reply
                replies.add(at)
        if not tip.tools_known:
            _refuse_unknown_tools(messages)
        # Only the teacher's replies are trained: an assistant message the harness wrote into the conversation is
        # context, as the gateway renders it for the policy.
        ids, mask = render_conversation(policy.template, messages, tools=tip.tools, template_kwargs=tip.template_kwargs,
                                        replies=replies)
        out.append((branch, ids, mask))
    return out


def _rerendered_transcript(trajectory: Trajectory, policy: PolicySide) -> tuple[list[int], list[int]]:
    if not trajectory.messages:
        raise RenderError("the harness recorded no messages and no engine calls: nothing to learn from")
    _refuse_unknown_tools(trajectory.messages)
    return render_conversation(policy.template, trajectory.messages)


def _refuse_unknown_tools(messages: list[dict[str, Any]]) -> None:
    if any(isinstance(m, dict) and m.get("role") == "assistant" and m.get("tool_calls") for m in messages):
        raise RenderError("the conversation calls tools, but nothing recorded the tools the harness declared (only "
                          "the policy gateway does): route the harness through it ([policy] gateway = true with a "
                          "token-id engine, or a scripted teacher) to keep such episodes")
