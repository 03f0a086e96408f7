"""A test double for harness tests: an OpenAI-compatible chat server that replays a fixed script.

It stands in for a model only where a real one cannot misbehave on demand
(malformed JSON, a 500, a reply that never comes) or must say exact words (a
scripted solution). It is not a policy and has no tokenizer: ``usage`` is a
character estimate unless a :class:`ScriptedReply` sets it.

```python
async with ScriptedChatServerForTests(['{"analysis": "", ...}', "not json"]) as server:
    trajectory = await harness.run(task, sandbox, server.policy())
    assert len(server.requests) == 2
```
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel

from tackroom.testing._served import RequestForTests, ResponseForTests, RoutesServedForTests


class ScriptedReply(BaseModel):
    """One scripted answer: assistant text, or an HTTP error, after an optional delay."""

    content: str = ""
    status: int = 200
    error_message: str = "scripted error"
    error_code: str | None = None
    delay_s: float = 0.0
    finish_reason: str = "stop"
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def _chars(messages: Any) -> int:
    if not isinstance(messages, list):
        return 0
    return sum(len(str(m.get("content") or "")) for m in messages if isinstance(m, dict))


class ScriptedChatServerForTests(RoutesServedForTests):
    """Serves ``POST /v1/chat/completions`` from a script on 127.0.0.1; a test fixture, never a policy.

    Replies are used in order; once the script runs out the last one repeats
    (``then="repeat_last"``) or every request gets HTTP 500 (``then="error"``).
    ``requests`` holds every request body received. ``GET /v1/models``
    advertises ``max_model_len`` when given.
    """

    def __init__(
        self,
        replies: Sequence[str | ScriptedReply],
        *,
        then: Literal["repeat_last", "error"] = "repeat_last",
        model: str = "scripted",
        max_model_len: int | None = None,
    ) -> None:
        self.replies = [r if isinstance(r, ScriptedReply) else ScriptedReply(content=r) for r in replies]
        self.then = then
        self.max_model_len = max_model_len
        self.requests: list[dict[str, Any]] = []
        routes = {("POST", "/v1/chat/completions"): self._chat, ("GET", "/v1/models"): self._models}
        self._serve(routes, model=model, what="scripted chat server", graceful_timeout_s=1)

    # -- routes ---------------------------------------------------------------------
    def _next(self) -> ScriptedReply:
        index = len(self.requests) - 1
        if index < len(self.replies):
            return self.replies[index]
        if self.then == "repeat_last" and self.replies:
            return self.replies[-1]
        return ScriptedReply(status=500, error_message=f"the script has no reply number {index + 1}")

    async def _models(self, request: RequestForTests) -> ResponseForTests:
        entry = {"id": self.model, "object": "model", "owned_by": "tests", "max_model_len": self.max_model_len}
        return ResponseForTests.json({"object": "list", "data": [entry]})

    async def _chat(self, request: RequestForTests) -> ResponseForTests:
        try:
            body = request.json()
        except ValueError:
            body = {}
        self.requests.append(body if isinstance(body, dict) else {"body": body})
        reply = self._next()
        if reply.delay_s:
            try:
                await asyncio.wait_for(self._closing.wait(), reply.delay_s)
                return ResponseForTests.json({"error": {"message": "the scripted server is stopping"}}, 503)
            except TimeoutError:
                pass
        if reply.status >= 400:
            error = {"message": reply.error_message, "type": "scripted_error", "param": None, "code": reply.error_code}
            return ResponseForTests.json({"error": error}, reply.status)
        prompt = reply.prompt_tokens if reply.prompt_tokens is not None else _chars(body.get("messages")) // 4 + 1
        completion = reply.completion_tokens if reply.completion_tokens is not None else len(reply.content) // 4 + 1
        return ResponseForTests.json({
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.content},
                         "finish_reason": reply.finish_reason}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        })
