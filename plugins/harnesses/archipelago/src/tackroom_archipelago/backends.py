"""How the harness reaches the model: token ids on ``/v1/completions`` (its own TITO), or chat completions.

``CompletionsBackend`` is the Mercor/SkyRL guide's option 1: the first prompt is
rendered with the chat template once; every later turn sends the exact ids so
far (prompt + generated ids + observations tokenized as a delta with a fixed
base), so generated text is never re-tokenized. ``ChatBackend`` is for an
endpoint that only speaks chat (the policy gateway, or a hosted API): it sends
messages and records the token ids the endpoint reports (the gateway's are
exact).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from pydantic import BaseModel, Field

from tackroom import Policy, TokenTurn
from tackroom_gateway import (
    ChatTemplate,
    EngineClient,
    EngineSettings,
    EngineTimeouts,
    EngineUnavailableError,
    ToolCall,
    ToolParser,
    classify_engine_rejection,
    forced_tool_call_tag,
)


class Generation(BaseModel):
    """One model turn, parsed."""

    text: str
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    parse_failures: int = 0
    finish_reason: str | None = None
    completion_tokens: int = 0
    room_before: int | None = None
    """Tokens of context left before this turn (None when the context length is unknown)."""

    @property
    def hit_context_limit(self) -> bool:
        return self.finish_reason == "length" and self.room_before is not None and self.completion_tokens >= self.room_before


class CompletionsBackend:
    """Token-in-token-out on ``/v1/completions``: keeps the running ids, loss mask and logprobs."""

    exact = True

    def __init__(self, policy: Policy, template: ChatTemplate, parser: ToolParser, *, context_length: int | None,
                 sampling: dict[str, Any], max_tokens_per_turn: int | None, timeout: float,
                 constrained_logprobs: str = "sampler") -> None:
        self.constrained_logprobs = constrained_logprobs
        self.engine = EngineClient(EngineSettings(base_url=policy.base_url, model=None if policy.model == "default" else policy.model,
                                                  api_key=policy.api_key, timeouts=EngineTimeouts(read=timeout)))
        self.template = template
        self.parser = parser
        self.context_length = context_length
        self.sampling = sampling
        self.max_tokens_per_turn = max_tokens_per_turn
        self.tokens: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] | None = []
        self.turns: list[TokenTurn] = []
        self.tools: list[dict[str, Any]] = []
        """The tools the prompt lists (rendered once per segment)."""
        self.call_tools: list[dict[str, Any]] = []
        """The tools a forced turn may call (the prompt's, plus those a toolbelt added since)."""
        self.segment = 0
        self._last_closed = True

    async def start(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
        info = await self.engine.fetch_info()
        if self.context_length is None:
            self.context_length = info.max_model_len
        self._render(messages, tools)

    def _render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
        self.tools, self.call_tools = list(tools), list(tools)
        self.tokens = self.template.render_ids(messages, tools=tools or None)
        self.mask = [0] * len(self.tokens)
        self.logprobs = [0.0] * len(self.tokens)
        self._last_closed = True

    def restart(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
        """Start a new segment: a fresh render; later turns carry ``branch`` = the new segment's index."""
        self.segment += 1
        self._render(messages, tools)

    @property
    def used(self) -> int:
        return len(self.tokens)

    @property
    def room(self) -> int | None:
        return None if self.context_length is None else self.context_length - len(self.tokens)

    async def generate(self, *, force_tool: bool, max_tokens: int | None = None, no_tools: bool = False,
                       only: str | None = None) -> Generation:
        room = self.room
        body: dict[str, Any] = {**self.sampling, "prompt": list(self.tokens)}
        wanted = max_tokens or self.max_tokens_per_turn
        body["max_tokens"] = min(wanted, room) if wanted and room is not None else (wanted or room or 1024)
        stops = list(body.get("stop_token_ids") or [])
        if self.template.end_of_turn_id is not None and self.template.end_of_turn_id not in stops:
            stops.append(self.template.end_of_turn_id)
        body["stop_token_ids"] = stops
        if force_tool:
            body["structured_outputs"] = {"structural_tag": json.dumps(forced_tool_call_tag(self.call_tools, only),
                                                                      ensure_ascii=False)}
        done = await self.engine.complete(body)
        if force_tool and self.constrained_logprobs == "model" and done.logprobs is not None:
            # Sampled under the grammar, the engine's logprobs are the constrained distribution's (a forced token
            # reads 0.0, measured up to 15 nats from the model's own); the trainer's forward pass computes the
            # model's own, so record those: one more prefill of this turn.
            done.logprobs = await self.engine.score(body["prompt"], done.completion_ids, body.get("model"))
        self.turns.append(TokenTurn(prompt_ids=list(self.tokens), completion_ids=done.completion_ids,
                                    logprobs=done.logprobs, finish_reason=done.finish_reason, branch=self.segment,
                                    policy_version=done.policy_version,
                                    logprobs_constrained=force_tool and self.constrained_logprobs == "sampler"))
        self.tokens.extend(done.completion_ids)
        self.mask.extend([1] * len(done.completion_ids))
        if self.logprobs is not None and done.logprobs is not None:
            self.logprobs.extend(done.logprobs)
        else:
            self.logprobs = None
        self._last_closed = bool(done.completion_ids) and done.completion_ids[-1] == self.template.end_of_turn_id
        parsed = self.parser.parse(done.text, parse_tools=bool(self.call_tools) and not no_tools)
        return Generation(text=done.text, content=parsed.content, reasoning=parsed.reasoning, tool_calls=parsed.tool_calls,
                          parse_failures=parsed.parse_failures, finish_reason=done.finish_reason,
                          completion_tokens=len(done.completion_ids), room_before=room)

    def observation_tokens(self, messages: list[dict[str, Any]]) -> list[int]:
        """The ids the observation messages add after the last turn (the fixed-base delta)."""
        return self.template.continuation_ids(messages, closed=self._last_closed, tools=self.tools or None)

    def add_observation(self, messages: list[dict[str, Any]], ids: list[int] | None = None) -> None:
        ids = self.observation_tokens(messages) if ids is None else ids
        self.tokens.extend(ids)
        self.mask.extend([0] * len(ids))
        if self.logprobs is not None:
            self.logprobs.extend([0.0] * len(ids))

    def estimate_tokens(self, text: str) -> int:
        return len(self.template.encode(text)) if text else 0

    def flattened(self) -> tuple[list[int], list[int], list[float] | None]:
        return list(self.tokens), list(self.mask), None if self.logprobs is None else list(self.logprobs)

    async def aclose(self) -> None:
        await self.engine.aclose()


class ChatBackend:
    """Chat completions with tools; records the token ids the endpoint returns (exact through the gateway)."""

    exact = False

    def __init__(self, policy: Policy, *, context_length: int | None, sampling: dict[str, Any],
                 max_tokens_per_turn: int | None, timeout: float, template: ChatTemplate | None,
                 parser: ToolParser | None = None) -> None:
        self.policy = policy
        self.parser = parser
        self.http = httpx.AsyncClient(base_url=policy.base_url.rstrip("/") + "/", timeout=httpx.Timeout(timeout, connect=10),
                                      headers={"Authorization": f"Bearer {policy.api_key}"})
        self.context_length = context_length
        self.sampling = sampling
        self.max_tokens_per_turn = max_tokens_per_turn
        self.template = template
        self.messages: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []
        self.turns: list[TokenTurn] = []
        self.used = 0
        self.segment = 0
        self.notes: list[str] = []

    async def start(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
        self.messages = [dict(m) for m in messages]
        self.tools = list(tools)
        if self.context_length is None:
            try:
                resp = await self.http.get("models")
                data = resp.json().get("data") or []
                self.context_length = next((d.get("max_model_len") for d in data if d.get("max_model_len")), None)
            except (httpx.HTTPError, ValueError, AttributeError):
                self.context_length = None
        self._estimate()

    def _estimate(self) -> None:
        if self.template is not None:
            self.used = len(self.template.render_ids(self.messages, tools=self.tools or None))

    def restart(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
        """Start a new segment: the next request sends only ``messages``; its turns carry the new ``branch``."""
        self.segment += 1
        self.messages = [dict(m) for m in messages]
        self.tools = list(tools)
        self._estimate()

    @property
    def room(self) -> int | None:
        return None if self.context_length is None else self.context_length - self.used

    async def generate(self, *, force_tool: bool, max_tokens: int | None = None, no_tools: bool = False,
                       only: str | None = None) -> Generation:
        room = self.room
        body: dict[str, Any] = {**self.sampling, "model": self.policy.model, "messages": self.messages,
                                "logprobs": True, "return_token_ids": True}
        if self.tools:  # sent unchanged within a segment, so the gateway's turns extend each other
            body["tools"] = self.tools
            body["tool_choice"] = ("none" if no_tools else {"type": "function", "function": {"name": only}} if only
                                   else "required" if force_tool else "auto")
        wanted = max_tokens or self.max_tokens_per_turn
        limit = min(wanted, room) if wanted and room is not None else (wanted or room)
        if limit:
            body["max_tokens"] = limit
        try:
            resp = await self.http.post("chat/completions", json=body)
        except httpx.HTTPError as exc:
            raise EngineUnavailableError(f"chat endpoint {self.policy.base_url} failed: {type(exc).__name__}: {exc}") from exc
        if resp.status_code >= 500:
            raise EngineUnavailableError(f"chat endpoint answered HTTP {resp.status_code}: {resp.text[:500]}")
        if resp.status_code != 200:
            raise classify_engine_rejection(resp.status_code, resp.text[:2000])
        data = resp.json()
        choice = data["choices"][0]
        msg = choice.get("message") or {}
        calls = [ToolCall(id=tc.get("id") or ToolCall.model_fields["id"].default_factory(),  # type: ignore[misc]
                          name=tc["function"]["name"], arguments=tc["function"].get("arguments") or "{}")
                 for tc in msg.get("tool_calls") or []]
        completion_ids = choice.get("token_ids")
        prompt_ids = data.get("prompt_token_ids")
        lps = [c.get("logprob", 0.0) for c in ((choice.get("logprobs") or {}).get("content") or [])]
        usage = data.get("usage") or {}
        n_completion = len(completion_ids) if completion_ids is not None else int(usage.get("completion_tokens") or 0)
        if completion_ids is not None and prompt_ids is not None:
            self.turns.append(TokenTurn(prompt_ids=prompt_ids, completion_ids=completion_ids,
                                        logprobs=lps if len(lps) == len(completion_ids) else None,
                                        finish_reason=choice.get("finish_reason"), branch=self.segment))
        self.used = int(usage.get("total_tokens") or (self.used + n_completion))
        reply = {"role": "assistant", "content": msg.get("content")}
        if msg.get("tool_calls"):
            reply["tool_calls"] = msg["tool_calls"]
        self.messages.append(reply)
        text = msg.get("content") or ""
        finish = choice.get("finish_reason")
        content, failures = msg.get("content"), 0
        if not calls and "<tool_call>" in text and self.parser is not None and self.tools and not no_tools:
            # An endpoint without a tool parser hands back the raw call text: parse it here.
            parsed = self.parser.parse(text)
            calls, content, failures = parsed.tool_calls, parsed.content, parsed.parse_failures
            if calls:
                reply["tool_calls"] = [c.openai() for c in calls]
                reply["content"] = content
        return Generation(text=text, content=content, reasoning=msg.get("reasoning_content"), tool_calls=calls,
                          parse_failures=failures, finish_reason=finish, completion_tokens=n_completion, room_before=room)

    def observation_tokens(self, messages: list[dict[str, Any]]) -> list[int]:
        if self.template is None:
            return [0] * (sum(len(str(m.get("content") or "")) for m in messages) // 4)
        return self.template.continuation_ids(messages, closed=True, tools=self.tools or None)

    def add_observation(self, messages: list[dict[str, Any]], ids: list[int] | None = None) -> None:
        self.messages.extend(messages)
        self.used += len(ids) if ids is not None else len(self.observation_tokens(messages))

    def estimate_tokens(self, text: str) -> int:
        return len(self.template.encode(text)) if (self.template and text) else len(text) // 4

    def flattened(self) -> tuple[list[int], list[int], list[float] | None]:
        """The last segment's ids with every turn's completion masked in, when each prompt extends the one before."""
        turns = [t for t in self.turns if t.branch == self.segment]
        if not turns:
            return [], [], None
        for prev, cur in zip(turns, turns[1:], strict=False):
            if cur.prompt_ids[: len(prev.prompt_ids) + len(prev.completion_ids)] != prev.prompt_ids + prev.completion_ids:
                self.notes.append("the chat endpoint re-rendered earlier turns; flattened tokens are left empty "
                                  "(route through the policy gateway for exact tokens)")
                return [], [], None
        last = turns[-1]
        ids = last.prompt_ids + last.completion_ids
        mask = [0] * len(ids)
        lps: list[float] | None = [0.0] * len(ids) if all(t.logprobs is not None for t in turns) else None
        for t in turns:
            for i in range(len(t.completion_ids)):
                mask[len(t.prompt_ids) + i] = 1
                if lps is not None:
                    lps[len(t.prompt_ids) + i] = t.logprobs[i]  # type: ignore[index]
        return ids, mask, lps

    async def aclose(self) -> None:
        await self.http.aclose()
