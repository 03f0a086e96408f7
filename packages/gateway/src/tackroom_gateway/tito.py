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

import asyncio
import json
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from tackroom import TackroomError, TokenTurn, Trajectory
from tackroom_gateway.chat_template import ChatTemplate
from tackroom_gateway.errors import EngineRequestInterruptedError

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
    """Tools and template options change the rendered prefix, so turns only extend turns with the same ones.

    Keys keep their order: a template writes the tools as JSON in the order they came (``tojson``), so tools that
    differ only in key order render different prompts, and the recorded key (what ``tackroom collect`` reads the
    tools back from) must render as the request did."""
    return json.dumps([tools or None, template_kwargs or None], ensure_ascii=False)


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
    policy_version: int | None = None
    logprobs_constrained: bool = False
    token_versions: list[int] | None = None

    def token_turn(self) -> TokenTurn:
        return TokenTurn(
            prompt_ids=self.prompt_ids,
            completion_ids=self.completion_ids,
            logprobs=self.logprobs,
            finish_reason=self.finish_reason,
            branch=self.branch,
            policy_version=self.policy_version,
            logprobs_constrained=self.logprobs_constrained,
            token_versions=self.token_versions,
        )


@dataclass
class OpenRequest:
    """An engine request of a session that has not finished yet."""

    seq: int
    started: float
    cancel_reason: str | None = None
    """Set when the gateway cancels it (session closed, gateway stopping)."""
    turn_ended: bool = True
    """False when the gateway itself cut it off (it is stopping), not the end of the agent's turn."""


@dataclass(frozen=True)
class CutOff:
    """An engine request cut off before the engine answered."""

    seq: int
    why: str
    waited: float
    turn_ended: bool
    engine_failure: str | None
    """Why the engine counted as not answering when it was cut off (None: it was answering)."""
    started: float = 0.0
    """When the request was sent (``time.monotonic()``)."""


def _no_liveness() -> str:
    return "nothing watches this session's engine (the session is not served by a PolicyGateway)"


class TitoSession:
    """One session's turns, branches, errors and open engine requests.

    ``token`` is the unguessable secret in the session's URL
    (``/sessions/{id}/{token}/v1``); only requests that carry it reach the session.
    ``engine_failure`` says why the engine counts as not answering right now, or None
    when it answers (``EngineLiveness.failure``); it decides whether a request still
    open when the agent's turn ended is infra.
    """

    def __init__(self, session_id: str, template: ChatTemplate, *, token: str | None = None,
                 engine_failure: Callable[[], str | None] = _no_liveness) -> None:
        self.session_id = session_id
        self.template = template
        self.token = token or secrets.token_urlsafe(24)
        self.engine_failure = engine_failure
        self.turns: list[RecordedTurn] = []
        self.tips: dict[int, int] = {}
        """branch -> index of its newest turn"""
        self.notes: list[str] = []
        self.errors: list[TackroomError] = []
        self.inflight: dict[asyncio.Future[Any], OpenRequest] = {}
        """Engine requests still running, by the task doing them."""
        self._clock = 0
        self._last_start = 0
        self._interrupted: CutOff | None = None
        self._last_outcome: TackroomError | CutOff | None = None
        """How the most recently finished engine request ended: None for a recorded turn, else its error or cut-off."""

    # -- open engine requests ----------------------------------------------------
    def request_started(self, work: asyncio.Future[Any]) -> OpenRequest:
        """Track ``work`` (the task calling the engine) until it finishes."""
        self._clock += 1
        self._last_start = self._clock
        entry = self.inflight[work] = OpenRequest(seq=self._clock, started=time.monotonic())
        work.add_done_callback(lambda done: self.inflight.pop(done, None))
        return entry

    def request_abandoned(self, entry: OpenRequest, why: str) -> None:
        """An engine request was cut off before the engine answered (``why`` says by what)."""
        self._clock += 1
        waited = time.monotonic() - entry.started
        failure = self.engine_failure() if entry.turn_ended else None
        cut = CutOff(seq=self._clock, why=why, waited=waited, turn_ended=entry.turn_ended, engine_failure=failure,
                     started=entry.started)
        note = f"turn {len(self.turns)}: an engine request was cut off after {waited:.1f}s: {why}"
        if entry.turn_ended:
            note += (f"; the engine was not answering ({failure})" if failure is not None else
                     "; the engine was answering, so the wait was the model's own generation")
        self.notes.append(note)
        self._interrupted = cut
        self._last_outcome = cut

    def _cut_off_error(self, cut: CutOff) -> EngineRequestInterruptedError | None:
        """The infra error a cut-off request stands for, or None when it was the model's own long generation:
        the engine answered (its probes) both when the request was cut off and now."""
        if not cut.turn_ended:
            return EngineRequestInterruptedError(
                f"an engine request was cut off: {cut.why} after waiting {cut.waited:.1f}s for the engine "
                "(the gateway's doing, not the model's)"
            )
        failure = cut.engine_failure or self.engine_failure()
        if failure is None:
            return None
        return EngineRequestInterruptedError(
            f"an engine request was still open when the agent's turn ended ({cut.why} after waiting "
            f"{cut.waited:.1f}s for the engine) and the engine did not answer a probe: {failure} "
            "(an overloaded or stuck engine, not the model's failure)"
        )

    def record_error(self, error: TackroomError) -> None:
        """An engine request (or its preparation) failed with a classified error."""
        self.errors.append(error)
        self._last_outcome = error

    def unsettled_since(self) -> float | None:
        """When the request that would decide :meth:`worst_error` by the engine's liveness was sent: the oldest
        one still open, or the last one cut off at the end of the turn while the engine counted as answering
        (no request after it); None when no such request exists."""
        if self.inflight:
            return min(e.started for e in self.inflight.values())
        cut = self._interrupted
        if cut is not None and cut.turn_ended and cut.seq > self._last_start and cut.engine_failure is None:
            return cut.started
        return None

    def _still_open(self) -> EngineRequestInterruptedError | None:
        """Asked with engine requests still open (the agent's turn is over): infra when the engine is not
        answering its probes, else None (the open request is the model's own long generation)."""
        if not self.inflight:
            return None
        failure = self.engine_failure()
        if failure is None:
            return None
        waited = time.monotonic() - min(e.started for e in self.inflight.values())
        return EngineRequestInterruptedError(
            f"an engine request was still open when the agent's turn ended and the engine did not answer a "
            f"probe: {failure}; {len(self.inflight)} request(s) waiting on the engine, the oldest for "
            f"{waited:.1f}s (an overloaded or stuck engine, not the model's failure)"
        )

    def cancel_open_requests(self, why: str, *, turn_ended: bool = True) -> int:
        """Cancel every engine request still running: the session closes (``turn_ended``) or the gateway
        stops (``turn_ended=False``: then a cut-off request is infra whatever the engine's state)."""
        for work, entry in list(self.inflight.items()):
            entry.cancel_reason = why
            entry.turn_ended = turn_ended
            work.cancel()
        return len(self.inflight)

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
        policy_version: int | None = None,
        logprobs_constrained: bool = False,
        token_versions: list[int] | None = None,
    ) -> RecordedTurn:
        """Add a finished engine call; decides its branch now (other calls may have finished meanwhile)."""
        self._last_outcome = None
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
            policy_version=policy_version,
            logprobs_constrained=logprobs_constrained,
            token_versions=token_versions if token_versions is not None and len(token_versions) == len(completion_ids)
            else None,
        )
        if turn.token_versions is not None:
            self.notes.append(f"turn {index}: cut at a weight update and continued; its tokens were sampled under "
                              f"versions {min(turn.token_versions)}..{max(turn.token_versions)}")
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
        metrics["flattened_completion_tokens"] = float(sum(loss_mask))
        notes = list(self.notes)
        if len(self.tips) > 1 and chain:
            # A client that rewrote its history (dropped a rejected reply, retried, ran a side conversation) left
            # turns outside the flattened sequence: say how much, so nobody takes the sequence for the whole episode.
            left = [t for t in self.turns if t not in chain]
            notes.append(f"the flattened tokens are branch {chain[-1].branch}'s ({len(chain)} of {len(self.turns)} turns, "
                         f"{sum(loss_mask)} of {int(metrics['completion_tokens'])} sampled tokens); "
                         f"{len(left)} turn(s) on {len(self.tips) - 1} other branch(es) are in `turns` only "
                         "(GET .../trajectory?branch=N flattens another)")
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
            notes=[*notes, *(f"engine error ({e.error_class}): {e}" for e in self.errors)],
        )

    def worst_error(self) -> TackroomError | None:
        """The error that should decide the trial, in this order:

        1. an engine request still open now, or cut off (client gone, session closed)
           with no request started after it, *while the engine was not answering its
           liveness probes*: the agent's turn ended waiting on a stuck engine
           (:class:`EngineRequestInterruptedError`, infra). While the engine answers, such
           a request is the model's own long generation and counts for nothing here;
           cut off by the gateway stopping, it is infra whatever the engine's state;
        2. the first infra error (engine down, 429/5xx after retries, timeout, garbled answer);
        3. the last model error (context length exceeded, request rejected);
        4. None.
        """
        still_open = self._still_open()
        if still_open is not None:
            return still_open
        if self._interrupted is not None and self._interrupted.seq > self._last_start:
            cut_off = self._cut_off_error(self._interrupted)
            if cut_off is not None:
                return cut_off
        for e in self.errors:
            if e.error_class == "infra":
                return e
        return self.errors[-1] if self.errors else None

    def unrecovered_error(self) -> TackroomError | None:
        """The infra error the session *ended* on, or None: an engine request open now or cut off last while
        the engine was not answering (as in :meth:`worst_error`), or the most recently finished one failed
        on infra (no turn succeeded after it). Unlike :meth:`worst_error`, an infra fault the agent got past
        (its client retried, the next call worked) does not count: this is what says whether an episode
        that the harness finished normally was cut short by the machinery."""
        still_open = self._still_open()
        if still_open is not None:
            return still_open
        last = self._last_outcome
        if isinstance(last, CutOff):
            return self._cut_off_error(last)
        return last if last is not None and last.error_class == "infra" else None


class SessionSummary(BaseModel):
    """What ``GET /sessions`` lists."""

    session_id: str
    turns: int
    branches: int
    open_requests: int = 0
    errors: list[str] = Field(default_factory=list)
