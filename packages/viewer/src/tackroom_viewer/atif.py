"""Trajectories to and from Harbor's ATIF (Agent Trajectory Interchange Format, v1.8).

How a tackroom trajectory maps (:func:`to_atif`):

- each chat message is a step: ``system`` → source ``system``, ``user`` → ``user``, ``assistant`` → ``agent`` (its
  ``tool_calls`` as ATIF tool calls, arguments parsed into an object, its ``reasoning_content`` kept);
- the ``tool`` messages that answer an agent step are that step's ``observation`` (``source_call_id`` = the
  call they answer); a tool message with no agent step before it becomes a ``system`` step;
- each engine call (``turns``) is the ``metrics`` of the agent step it produced (``prompt_token_ids``,
  ``completion_token_ids``, ``logprobs``; finish reason and branch in ``metrics.extra``) when the harness
  recorded one call per assistant message, else all turns go in the root's ``extra``;
- what ATIF has no field for is in ``extra["tackroom"]``: the flattened sequence the trainer consumes (token ids,
  loss mask, logprobs), stop reason, final answer, behaviour metrics, notes, the trial's ``result.json``; and a
  message that the mapping above would not give back byte for byte is kept whole in its step's ``extra``.

So :func:`from_atif` gives back the very :class:`tackroom.Trajectory` (and result) that was exported. An ATIF
document from another producer (a Harbor agent) is read too: messages from its steps, turns from its steps'
token ids, the flattened sequence where those turns extend one another, loss mask 1 on completion ids.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from pydantic import ValidationError

from tackroom import ConfigError, TokenTurn, Trajectory
from tackroom_viewer.atif_models import (
    AtifAgent,
    AtifContentPart,
    AtifFinalMetrics,
    AtifMetrics,
    AtifObservation,
    AtifObservationResult,
    AtifStep,
    AtifToolCall,
    AtifTrajectory,
)

KEY = "tackroom"
FORMAT = 1
SOURCES = {"system": "system", "user": "user", "assistant": "agent"}


class AtifImportError(ConfigError):
    """An ATIF document that cannot be read as a trajectory (what is wrong is in the message)."""


def _tackroom_version() -> str:
    try:
        return version("tackroom")
    except PackageNotFoundError:  # pragma: no cover - a source checkout without metadata
        return "unknown"


# -- messages → steps ---------------------------------------------------------------------------------
def _content(content: Any) -> str | list[AtifContentPart]:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content and all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
        return [AtifContentPart(type="text", text=p["text"]) for p in content]
    if content is None:
        return ""
    return json.dumps(content, ensure_ascii=False)


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def _tool_calls(message: dict[str, Any], step_id: int) -> list[AtifToolCall] | None:
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return None
    out = []
    for k, call in enumerate(calls):
        call = call if isinstance(call, dict) else {}
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        out.append(AtifToolCall(tool_call_id=str(call.get("id") or f"call-{step_id}-{k}"),
                                function_name=str(function.get("name") or ""),
                                arguments=_arguments(function.get("arguments"))))
    return out


def _turn_metrics(turn: TokenTurn) -> AtifMetrics:
    return AtifMetrics(prompt_tokens=len(turn.prompt_ids), completion_tokens=len(turn.completion_ids),
                       prompt_token_ids=list(turn.prompt_ids), completion_token_ids=list(turn.completion_ids),
                       logprobs=None if turn.logprobs is None else list(turn.logprobs),
                       extra={"finish_reason": turn.finish_reason, "branch": turn.branch,
                              "policy_version": turn.policy_version,
                              "logprobs_constrained": turn.logprobs_constrained})


class _StepsBuilder:
    """Messages in order → steps, keeping each message that the default reading would not give back."""

    def __init__(self, turns_per_step: list[TokenTurn] | None) -> None:
        self.steps: list[AtifStep] = []
        self.originals: list[dict[str, Any]] = []
        """Per step: position within the step (0: its message, n: its n-th observation) → the message."""
        self.turns = turns_per_step
        self.agent_steps = 0

    def add(self, message: Any) -> None:
        m = message if isinstance(message, dict) else {"role": None, "content": message}
        role = m.get("role")
        last = self.steps[-1] if self.steps else None
        if role == "tool" and last is not None and last.source == "agent":
            results = (last.observation or AtifObservation(results=[])).results
            call_ids = {c.tool_call_id for c in last.tool_calls or []}
            call_id = m.get("tool_call_id")
            results.append(AtifObservationResult(source_call_id=call_id if call_id in call_ids else None,
                                                 content=_content(m.get("content"))))
            last.observation = AtifObservation(results=results)
            self._keep(m, len(results))
            return
        step_id = len(self.steps) + 1
        source = SOURCES.get(role, "system")
        step = AtifStep(step_id=step_id, source=source, message=_content(m.get("content")))
        if source == "agent":
            step.tool_calls = _tool_calls(m, step_id)
            reasoning = m.get("reasoning_content")
            step.reasoning_content = reasoning if isinstance(reasoning, str) else None
            if self.turns is not None:
                step.metrics = _turn_metrics(self.turns[self.agent_steps])
                step.llm_call_count = 1
            self.agent_steps += 1
        self.steps.append(step)
        self.originals.append({})
        self._keep(m, 0)

    def _keep(self, message: dict[str, Any], position: int) -> None:
        step = self.steps[-1]
        if _message_at(step, position) != message:
            self.originals[-1][str(position)] = message

    def build(self) -> list[AtifStep]:
        for step, originals in zip(self.steps, self.originals):
            if originals:
                step.extra = {KEY: {"messages": originals}}
        return self.steps


# -- steps → messages ----------------------------------------------------------------------------------
def _text(message: str | list[AtifContentPart]) -> Any:
    if isinstance(message, str):
        return message
    return [{"type": "text", "text": p.text} if p.type == "text" else {"type": p.type, "source": p.source}
            for p in message]


def _message_at(step: AtifStep, position: int) -> dict[str, Any]:
    """The chat message the default reading gives for a step's message (0) or its n-th observation result."""
    if position:
        result = step.observation.results[position - 1]  # type: ignore[union-attr]
        out: dict[str, Any] = {"role": "tool"}
        if result.source_call_id is not None:
            out["tool_call_id"] = result.source_call_id
        out["content"] = _text(result.content) if result.content is not None else ""
        return out
    role = {"system": "system", "user": "user", "agent": "assistant"}[step.source]
    out = {"role": role, "content": _text(step.message)}
    if step.tool_calls:
        out["tool_calls"] = [{"id": c.tool_call_id, "type": "function",
                              "function": {"name": c.function_name, "arguments": json.dumps(c.arguments)}}
                             for c in step.tool_calls]
    if step.reasoning_content is not None:
        out["reasoning_content"] = step.reasoning_content
    return out


def _step_messages(step: AtifStep) -> list[dict[str, Any]]:
    originals = ((step.extra or {}).get(KEY) or {}).get("messages") or {}
    count = 1 + (len(step.observation.results) if step.observation else 0)
    return [originals.get(str(i)) or _message_at(step, i) for i in range(count)]


# -- export --------------------------------------------------------------------------------------------
def to_atif(trajectory: Trajectory, result: dict[str, Any] | None = None, *, session_id: str | None = None
            ) -> dict[str, Any]:
    """One trial as an ATIF v1.8 document (a dict ready for ``json.dumps``); ``result`` is its result.json."""
    result = result or {}
    n_assistant = sum(1 for m in trajectory.messages if isinstance(m, dict) and m.get("role") == "assistant")
    per_step = trajectory.turns and len(trajectory.turns) == n_assistant
    builder = _StepsBuilder(list(trajectory.turns) if per_step else None)
    for message in trajectory.messages:
        builder.add(message)
    steps = builder.build()
    synthetic = not steps
    if synthetic:  # ATIF needs a step; an empty conversation (a harness that failed first) gets a marked one
        steps = [AtifStep(step_id=1, source="system", message="(no messages were recorded)",
                          extra={KEY: {"synthetic": True}})]
    trial_id = result.get("trial_id") if isinstance(result.get("trial_id"), str) else None
    kept = trajectory.model_dump(mode="json", include={"token_ids", "loss_mask", "logprobs", "final_answer",
                                                       "stop_reason", "metrics", "notes"})
    if trajectory.turns and not per_step:
        kept["turns"] = [t.model_dump(mode="json") for t in trajectory.turns]
    reward = result.get("reward")
    doc = AtifTrajectory(
        session_id=session_id or trial_id, trajectory_id=trial_id,
        agent=AtifAgent(name=str(result.get("harness") or "tackroom"), version=_tackroom_version(),
                        model_name=result.get("model") if isinstance(result.get("model"), str) else None,
                        extra={"framework": "tackroom", "sandbox": result.get("sandbox"),
                               "verifier": result.get("verifier")}),
        steps=steps,
        notes=f"tackroom trial {trial_id or '(no result)'}: reward {reward}, stop reason {trajectory.stop_reason}",
        final_metrics=AtifFinalMetrics(
            total_prompt_tokens=sum(len(t.prompt_ids) for t in trajectory.turns) if trajectory.turns else None,
            total_completion_tokens=sum(len(t.completion_ids) for t in trajectory.turns) if trajectory.turns else None,
            total_steps=len(steps),
            extra={"reward": reward, "components": result.get("components") or {}}),
        extra={KEY: {"format": FORMAT, "trajectory": kept, "result": result or None}},
    )
    return doc.model_dump(mode="json", exclude_none=True)


# -- import --------------------------------------------------------------------------------------------
@dataclass
class ImportedTrial:
    trajectory: Trajectory
    result: dict[str, Any] | None
    trial_id: str | None


def _chained(turns: list[TokenTurn]) -> tuple[list[int], list[int], list[float] | None]:
    """The flattened sequence when each turn extends the one before (else empty)."""
    if not turns:
        return [], [], None
    for prev, cur in zip(turns, turns[1:]):
        if cur.prompt_ids[: len(prev.prompt_ids) + len(prev.completion_ids)] != prev.prompt_ids + prev.completion_ids:
            return [], [], None
    last = turns[-1]
    ids = last.prompt_ids + last.completion_ids
    mask, logprobs = [0] * len(ids), [0.0] * len(ids)
    for t in turns:
        start = len(t.prompt_ids)
        for i in range(len(t.completion_ids)):
            mask[start + i] = 1
            logprobs[start + i] = t.logprobs[i] if t.logprobs is not None else 0.0
    return ids, mask, logprobs if all(t.logprobs is not None for t in turns) else None


def from_atif(document: dict[str, Any]) -> ImportedTrial:
    """An ATIF document back as a tackroom trajectory (and the trial's result where the document carries one)."""
    try:
        doc = AtifTrajectory.model_validate(document)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(document)'}: {e['msg']}" for e in exc.errors()[:8])
        raise AtifImportError(f"not an ATIF trajectory we can read: {problems}") from None
    ours = (doc.extra or {}).get(KEY)
    ours = ours if isinstance(ours, dict) and ours.get("format") == FORMAT else None
    synthetic = len(doc.steps) == 1 and ((doc.steps[0].extra or {}).get(KEY) or {}).get("synthetic")
    messages = [] if synthetic else [m for step in doc.steps for m in _step_messages(step)]
    try:
        turns = [TokenTurn(prompt_ids=s.metrics.prompt_token_ids, completion_ids=s.metrics.completion_token_ids,
                           logprobs=s.metrics.logprobs, finish_reason=(s.metrics.extra or {}).get("finish_reason"),
                           branch=(s.metrics.extra or {}).get("branch") or 0,
                           policy_version=(s.metrics.extra or {}).get("policy_version"),
                           logprobs_constrained=bool((s.metrics.extra or {}).get("logprobs_constrained")))
                 for s in doc.steps if s.source == "agent" and s.metrics is not None
                 and s.metrics.prompt_token_ids is not None and s.metrics.completion_token_ids is not None]
        if ours is not None:
            kept = dict(ours.get("trajectory") or {})
            if "turns" in kept:
                turns = [TokenTurn.model_validate(t) for t in kept.pop("turns")]
            trajectory = Trajectory.model_validate({**kept, "messages": messages,
                                                    "turns": [t.model_dump() for t in turns]})
            result = ours.get("result") if isinstance(ours.get("result"), dict) else None
            trial_id = (result or {}).get("trial_id") or doc.trajectory_id or doc.session_id
            return ImportedTrial(trajectory, result, trial_id)
        ids, mask, logprobs = _chained(turns)
        last_agent = next((s for s in reversed(doc.steps) if s.source == "agent"), None)
        final = last_agent.message if last_agent and not last_agent.tool_calls and isinstance(last_agent.message, str) else None
        notes = [doc.notes] if doc.notes else []
        if doc.subagent_trajectories:
            notes.append(f"{len(doc.subagent_trajectories)} embedded subagent trajectories were not imported")
        trajectory = Trajectory(messages=messages, turns=turns, token_ids=ids, loss_mask=mask, logprobs=logprobs,
                                final_answer=final, notes=notes)
    except ValidationError as exc:
        raise AtifImportError(f"the ATIF document's token data is inconsistent: {exc.errors()[0]['msg']}") from None
    return ImportedTrial(trajectory, None, doc.trajectory_id or doc.session_id)
