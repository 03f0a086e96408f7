"""Per-session token accounting: which exact ids each turn sends, and the trajectory they add up to.

A session is a list of turns. Each turn remembers the request's messages, the
assistant reply the gateway returned, and the exact ``prompt_ids`` /
``completion_ids`` of its engine call. A new request is matched against every
earlier turn: when ``turn.messages + [turn.reply]`` is a prefix of the new
messages (compared leniently: whitespace around assistant text, JSON spacing in
tool-call arguments and reasoning fields do not matter), the new prompt is that
turn's ``prompt_ids + completion_ids`` followed by the tokens of only the new
messages (:meth:`ChatTemplate.continuation_ids`). Model output is never
re-tokenized.

When the parent is the newest turn of its branch, the new turn continues the
branch; otherwise (the client edited or dropped earlier messages, retried a
request, or runs a side conversation in the same session) it starts a new
branch, recorded in ``TokenTurn.branch`` and in the trajectory's notes. A
request that extends no earlier turn is rendered from scratch.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field

from tackroom.errors import TackroomError
from tackroom.gateway.chat_template import ChatTemplate
from tackroom.trajectory import TokenTurn, Trajectory

_THINK = re.compile(r"^\s*(?:<think>)?.*?</think>\s*", re.DOTALL)


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif isinstance(p, dict) and p.get("type") == "text":
                parts.append(p.get("text") or "")
            else:
                parts.append(json.dumps(p, sort_keys=True))
        return "".join(parts)
    return json.dumps(content, sort_keys=True)


def _canonical_args(args: Any) -> str:
    if isinstance(args, str):
        try:
            return json.dumps(json.loads(args), sort_keys=True, ensure_ascii=False)
        except ValueError:
            return args.strip()
    return json.dumps(args, sort_keys=True, ensure_ascii=False)


def message_key(message: dict[str, Any]) -> tuple:
    """What must be equal for two messages to count as the same history entry."""
    role = message.get("role")
    content = _text(message.get("content"))
    if role == "assistant":
        content = _THINK.sub("", content, count=1) if "</think>" in content else content
        calls = tuple(
            ((tc.get("function") or tc).get("name"), _canonical_args((tc.get("function") or tc).get("arguments")))
            for tc in message.get("tool_calls") or []
        )
        return ("assistant", content.strip(), calls)
    return (role, content, message.get("name"), message.get("tool_call_id"))


def context_key(tools: list[dict[str, Any]] | None, template_kwargs: dict[str, Any] | None) -> str:
    """Tools and template options change the rendered prefix, so turns only extend turns with the same ones."""
    return json.dumps([tools or None, template_kwargs or None], sort_keys=True, ensure_ascii=False)


class PromptPlan(BaseModel):
    """The exact prompt for one engine call and where it came from."""

    prompt_ids: list[int]
    parent: int | None = None
    """Index of the turn this prompt extends; None when rendered from scratch."""
    messages: list[dict[str, Any]]
    keys: list[tuple]
    context: str
    new_messages: int
    """How many request messages were rendered for this prompt (all of them when fresh)."""


class RecordedTurn(BaseModel):
    """A finished engine call inside a session."""

    index: int
    messages: list[dict[str, Any]]
    keys: list[tuple]
    reply: dict[str, Any]
    reply_key: tuple
    context: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float] | None = None
    finish_reason: str | None = None
    branch: int = 0
    parent: int | None = None
    tool_calls: int = 0
    tool_call_parse_failures: int = 0

    def token_turn(self) -> TokenTurn:
        return TokenTurn(
            prompt_ids=self.prompt_ids,
            completion_ids=self.completion_ids,
            logprobs=self.logprobs,
            finish_reason=self.finish_reason,
            branch=self.branch,
        )


class TitoSession:
    """One session's turns, branches and errors."""

    def __init__(self, session_id: str, template: ChatTemplate) -> None:
        self.session_id = session_id
        self.template = template
        self.turns: list[RecordedTurn] = []
        self.tips: dict[int, int] = {}
        """branch -> index of its newest turn"""
        self.notes: list[str] = []
        self.errors: list[TackroomError] = []

    # -- planning --------------------------------------------------------------
    def _parent_for(self, keys: list[tuple], context: str) -> RecordedTurn | None:
        best: RecordedTurn | None = None
        best_len = -1
        for turn in reversed(self.turns):
            n = len(turn.keys) + 1
            if n <= best_len or n > len(keys) or turn.context != context:
                continue
            if keys[n - 1] == turn.reply_key and keys[: n - 1] == turn.keys:
                best, best_len = turn, n
        return best

    def plan(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ) -> PromptPlan:
        """The prompt ids for a request with these messages (see the module docstring)."""
        keys = [message_key(m) for m in messages]
        context = context_key(tools, template_kwargs)
        parent = self._parent_for(keys, context)
        if parent is None:
            ids = self.template.render_ids(messages, tools=tools, template_kwargs=template_kwargs)
            return PromptPlan.model_construct(prompt_ids=ids, parent=None, messages=messages, keys=keys, context=context, new_messages=len(messages))
        done = len(parent.keys) + 1
        closed = bool(parent.completion_ids) and parent.completion_ids[-1] == self.template.end_of_turn_id
        tail = self.template.continuation_ids(
            messages[done:], closed=closed, tools=tools, template_kwargs=template_kwargs
        )
        return PromptPlan.model_construct(
            prompt_ids=parent.prompt_ids + parent.completion_ids + tail,
            parent=parent.index,
            messages=messages,
            keys=keys,
            context=context,
            new_messages=len(messages) - done,
        )

    # -- recording -------------------------------------------------------------
    def record(
        self,
        plan: PromptPlan,
        *,
        completion_ids: list[int],
        logprobs: list[float] | None,
        finish_reason: str | None,
        reply: dict[str, Any],
        tool_calls: int = 0,
        tool_call_parse_failures: int = 0,
    ) -> RecordedTurn:
        """Add a finished engine call; decides its branch now (other calls may have finished meanwhile)."""
        index = len(self.turns)
        if plan.parent is None:
            if not self.turns:
                branch = 0
            else:
                branch = max(self.tips) + 1
                self.notes.append(
                    f"turn {index}: its messages extend no earlier turn (history rewritten, or a side "
                    f"conversation in the same session); rendered from scratch as branch {branch}"
                )
        else:
            parent = self.turns[plan.parent]
            if self.tips.get(parent.branch) == parent.index:
                branch = parent.branch
            else:
                branch = max(self.tips) + 1
                self.notes.append(
                    f"turn {index}: extends turn {parent.index}, which is no longer the newest turn of "
                    f"branch {parent.branch} (history rewritten or request retried); started branch {branch}"
                )
        turn = RecordedTurn.model_construct(
            index=index,
            messages=plan.messages,
            keys=plan.keys,
            reply=reply,
            reply_key=message_key(reply),
            context=plan.context,
            prompt_ids=plan.prompt_ids,
            completion_ids=completion_ids,
            logprobs=logprobs if logprobs is not None and len(logprobs) == len(completion_ids) else None,
            finish_reason=finish_reason,
            branch=branch,
            parent=plan.parent,
            tool_calls=tool_calls,
            tool_call_parse_failures=tool_call_parse_failures,
        )
        self.turns.append(turn)
        self.tips[branch] = index
        return turn

    # -- reading -----------------------------------------------------------------
    def lineage(self, branch: int | None = None) -> list[RecordedTurn]:
        """Turns from the first to the newest one of ``branch`` (default: the newest turn's branch), parents first."""
        if not self.turns:
            return []
        if branch is None:
            branch = self.turns[-1].branch
        if branch not in self.tips:
            raise KeyError(f"session {self.session_id!r} has no branch {branch}; it has {sorted(self.tips)}")
        chain = []
        at: int | None = self.tips[branch]
        while at is not None:
            chain.append(self.turns[at])
            at = self.turns[at].parent
        return chain[::-1]

    def trajectory(self, branch: int | None = None) -> Trajectory:
        """All turns, plus the flattened tokens of one branch (default: the newest turn's).

        ``loss_mask`` is 1 exactly on tokens the engine generated in that branch's
        lineage; ``logprobs`` are the engine's sampled-token logprobs there and 0.0
        elsewhere (None when a turn came back without logprobs).
        """
        chain = self.lineage(branch)
        token_ids: list[int] = []
        loss_mask: list[int] = []
        logprobs: list[float] | None = []
        messages: list[dict[str, Any]] = []
        if chain:
            tip = chain[-1]
            token_ids = tip.prompt_ids + tip.completion_ids
            loss_mask = [0] * len(token_ids)
            logprobs = [0.0] * len(token_ids) if all(t.logprobs is not None for t in chain) else None
            for t in chain:
                start = len(t.prompt_ids)
                for i in range(len(t.completion_ids)):
                    loss_mask[start + i] = 1
                    if logprobs is not None:
                        logprobs[start + i] = t.logprobs[i]  # type: ignore[index]
            messages = [*tip.messages, tip.reply]
        metrics = {
            "turns": float(len(self.turns)),
            "branches": float(len(self.tips)),
            "tool_calls": float(sum(t.tool_calls for t in self.turns)),
            "tool_call_parse_failures": float(sum(t.tool_call_parse_failures for t in self.turns)),
            "completion_tokens": float(sum(len(t.completion_ids) for t in self.turns)),
            "engine_errors": float(len(self.errors)),
        }
        stop_reason = "completed"
        if any(getattr(e, "code", None) == "context_length_exceeded" for e in self.errors):
            stop_reason = "context_exhausted"
        return Trajectory(
            messages=messages,
            turns=[t.token_turn() for t in self.turns],
            token_ids=token_ids,
            loss_mask=loss_mask,
            logprobs=logprobs,
            stop_reason=stop_reason,
            metrics=metrics,
            notes=[*self.notes, *(f"engine error ({e.error_class}): {e}" for e in self.errors)],
        )

    def worst_error(self) -> TackroomError | None:
        """The error that should decide the trial: an infra error first (retry), else the last model error."""
        for e in self.errors:
            if e.error_class == "infra":
                return e
        return self.errors[-1] if self.errors else None


class SessionSummary(BaseModel):
    """What ``GET /sessions`` lists."""

    session_id: str
    turns: int
    branches: int
    errors: list[str] = Field(default_factory=list)
