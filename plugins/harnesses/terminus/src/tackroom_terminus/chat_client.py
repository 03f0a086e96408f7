"""Chat completions at ``policy.base_url`` over httpx, with retries and classified errors.

Transport failures and 502/503/504 are retried (tenacity, exponential backoff);
what is left is raised as a typed error the trial runtime classifies:

- :class:`ModelEndpointError` (``infra``): unreachable, timed out, 5xx, or an
  answer that is not a chat completion; the trial is retried.
- :class:`ContextExhaustedError` (``model``): the conversation no longer fits
  the model's context.
- :class:`ModelRequestError` (``model``): the endpoint refused this request.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
from pydantic import BaseModel
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from tackroom import InfraError, ModelError, Policy
from tackroom.services import openai_error_message as _error_message

_RETRY_STATUS = (502, 503, 504)
_CONTEXT_MARKERS = ("context_length_exceeded", "maximum context length", "context length", "max_model_len", "too many tokens")


class ModelEndpointError(InfraError):
    """The model endpoint could not be reached or did not answer properly; the trial is retried."""


class ContextExhaustedError(ModelError):
    """The conversation no longer fits the model's context window; the episode ends (reward from what was done)."""


class ModelRequestError(ModelError):
    """The endpoint rejected the request (HTTP 4xx) for a reason other than the context length."""


class ChatReply(BaseModel):
    """One assistant answer and the token counts the endpoint reported."""

    content: str
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    seconds: float = 0.0

    @property
    def total_tokens(self) -> int | None:
        if self.prompt_tokens is None or self.completion_tokens is None:
            return None
        return self.prompt_tokens + self.completion_tokens


class _Retryable(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)


class ChatClient:
    """Chat completions against one :class:`~tackroom.Policy`; use as an async context manager."""

    def __init__(
        self,
        policy: Policy,
        *,
        request_timeout_s: float = 300.0,
        connect_timeout_s: float = 10.0,
        retries: int = 3,
        retry_backoff_s: float = 0.5,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.policy = policy
        self.url = policy.base_url.rstrip("/")
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(request_timeout_s, connect=connect_timeout_s),
            headers={"Authorization": f"Bearer {policy.api_key}"},
            transport=transport,
        )

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _send(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(self.retries + 1),
            wait=wait_exponential(multiplier=self.retry_backoff_s, max=8),
            retry=retry_if_exception(lambda e: isinstance(e, _Retryable)),
            reraise=True,
        ):
            with attempt:
                try:
                    response = await self._client.request(method, f"{self.url}{path}", json=body)
                except httpx.TimeoutException as exc:
                    raise _Retryable(f"no answer from {self.url}{path} in time ({type(exc).__name__})") from exc
                except httpx.TransportError as exc:
                    raise _Retryable(f"cannot reach {self.url}{path}: {type(exc).__name__}: {exc}") from exc
                if response.status_code in _RETRY_STATUS:
                    message, _ = _error_message(response)
                    raise _Retryable(f"{self.url}{path} answered HTTP {response.status_code}: {message}")
                return response
        raise AssertionError("unreachable")  # pragma: no cover

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        try:
            return await self._send(method, path, body)
        except _Retryable as exc:
            raise ModelEndpointError(
                f"{exc} (after {self.retries + 1} attempts); is the model server up? "
                "(`tackroom model status`, or check [policy] base_url)"
            ) from exc

    async def context_limit(self) -> int | None:
        """The model's context length from ``GET /models`` (``max_model_len``), or None when not advertised."""
        try:
            response = await self.request("GET", "/models")
            data = response.json().get("data") or []
        except (ModelEndpointError, ValueError, AttributeError):
            return None
        for entry in data:
            if isinstance(entry, dict) and entry.get("id") == self.policy.model and entry.get("max_model_len"):
                return int(entry["max_model_len"])
        lengths = [int(e["max_model_len"]) for e in data if isinstance(e, dict) and e.get("max_model_len")]
        return lengths[0] if len(lengths) == 1 else None

    async def complete(self, messages: list[dict[str, Any]], **params: Any) -> ChatReply:
        """One chat completion; ``params`` (max_tokens, response_format, …) are merged over ``policy.sampling``."""
        body = {**self.policy.sampling, **{k: v for k, v in params.items() if v is not None}}
        body.update({"model": self.policy.model, "messages": messages, "stream": False})
        t0 = time.monotonic()
        response = await self.request("POST", "/chat/completions", body)
        seconds = time.monotonic() - t0
        if response.status_code >= 400:
            message, code = _error_message(response)
            low = f"{code} {message}".lower()
            if response.status_code in (400, 413, 422) and any(m in low for m in _CONTEXT_MARKERS):
                raise ContextExhaustedError(f"the conversation no longer fits the model's context: {message}")
            if response.status_code in (401, 403, 404):
                raise ModelEndpointError(
                    f"{self.url}/chat/completions answered HTTP {response.status_code}: {message}; "
                    "check [policy] base_url (it ends in /v1), model and api_key"
                )
            if response.status_code >= 500:
                raise ModelEndpointError(f"{self.url}/chat/completions answered HTTP {response.status_code}: {message}")
            raise ModelRequestError(f"the model endpoint rejected the request (HTTP {response.status_code}): {message}")
        try:
            data = response.json()
            choice = data["choices"][0]
            content = choice["message"].get("content") or ""
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ModelEndpointError(
                f"{self.url}/chat/completions answered something that is not a chat completion: {response.text[:300]!r}"
            ) from exc
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        return ChatReply(
            content=content if isinstance(content, str) else str(content),
            finish_reason=choice.get("finish_reason"),
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            seconds=seconds,
        )
