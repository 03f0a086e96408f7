"""The policy's sampling settings, added to each Responses request Codex sends.

Codex sends no ``temperature``, ``top_p`` or ``max_output_tokens`` and has no config key for them (its provider
table has headers and query parameters, no body fields). Without them every call would sample at the engine's
defaults and could write until the context is full. So the relay in front of the policy fills them in, on
``POST .../responses`` only, and only where the request does not set them itself.
"""

from __future__ import annotations

import json
from typing import Any

RESPONSES_FIELDS = {"temperature": "temperature", "top_p": "top_p", "max_tokens": "max_output_tokens",
                    "max_completion_tokens": "max_output_tokens", "max_output_tokens": "max_output_tokens"}
"""Policy sampling keys (chat names) → their Responses names; other keys have no Responses field."""


def responses_sampling(sampling: dict[str, Any], max_output_tokens: int) -> dict[str, Any]:
    """The Responses fields for a policy's ``sampling`` (``max_output_tokens`` when it sets none)."""
    out: dict[str, Any] = {}
    for key, value in sampling.items():
        field = RESPONSES_FIELDS.get(key)
        if field is not None and value is not None:
            out[field] = value
    out.setdefault("max_output_tokens", max_output_tokens)
    return out


def with_sampling(body: bytes, defaults: dict[str, Any]) -> bytes:
    """``body`` with ``defaults`` for the keys it lacks; a body that is not a JSON object passes unchanged (the
    gateway answers it with its own error)."""
    try:
        doc = json.loads(body)
    except ValueError:
        return body
    if not isinstance(doc, dict):
        return body
    missing = {k: v for k, v in defaults.items() if doc.get(k) is None}
    if not missing:
        return body
    return json.dumps({**doc, **missing}, ensure_ascii=False).encode()


class ResponsesSamplingMiddleware:
    """ASGI middleware for the relay: fills the sampling fields into ``POST .../responses`` bodies."""

    def __init__(self, app: Any, defaults: dict[str, Any]) -> None:
        self.app = app
        self.defaults = defaults

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].rstrip("/").endswith(
                "/responses"):
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = with_sampling(b"".join(chunks), self.defaults)
        headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app({**scope, "headers": headers}, replay, send)
