"""Two ways to reach a judge: any OpenAI-compatible endpoint over httpx, or any provider through litellm.

Both turn every failure into one of: :class:`RetryableJudgeError` (429, 5xx,
timeouts, dropped connections, an unparseable body), :class:`KeyRejectedError`
(401/403), :class:`JudgeContextTooLongError` or :class:`JudgeBadRequestError`.
"""

from __future__ import annotations

import abc
import asyncio
import email.utils
import json
import os
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, Field

from tackroom_rubric_judge.errors import (
    JudgeBadRequestError,
    JudgeContextTooLongError,
    KeyRejectedError,
    RetryableJudgeError,
)

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529}
CONTEXT_MARKERS = (
    "context length", "context_length", "maximum context", "context window", "too many tokens",
    "prompt is too long", "maximum input length", "input is too long", "reduce the length",
)


class ChatRequest(BaseModel):
    """One chat completion request to the judge."""

    model: str
    messages: list[dict[str, Any]]
    max_tokens: int = 512
    temperature: float = 0.0
    response_format: dict[str, Any] | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)


class ChatReply(BaseModel):
    """The judge's message text and why it stopped."""

    content: str
    finish_reason: str | None = None
    usage: dict[str, Any] = Field(default_factory=dict)


class JudgeTransport(abc.ABC):
    """Sends one request with one key, under one timeout, and classifies what went wrong."""

    @abc.abstractmethod
    async def complete(self, request: ChatRequest, *, api_key: str | None, timeout: float) -> ChatReply:
        """Return the reply or raise one of the classified errors above."""

    async def aclose(self) -> None:
        """Release connections."""
        return None


def openai_base_url(url: str) -> str:
    """``http://host:8000`` → ``http://host:8000/v1``; a URL that has a path keeps it."""
    url = url.rstrip("/")
    return url + "/v1" if urlsplit(url).path in ("", "/") else url


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header (seconds or an HTTP date) in seconds."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_message(text: str) -> str:
    """The ``error.message`` of an OpenAI-style error body, else the body itself."""
    try:
        body = json.loads(text)
    except ValueError:
        return text
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            for key in ("message", "detail"):
                if isinstance(error.get(key), str):
                    return error[key]
        elif isinstance(error, str):
            return error
    return text


def classify_status(status: int, text: str, retry_after: str | None = None) -> None:
    """Raise the error a non-2xx status means; return for 2xx."""
    if 200 <= status < 300:
        return
    snippet = " ".join(error_message(text).split())[:500]
    if status in (401, 403):
        raise KeyRejectedError(status, f"HTTP {status}: {snippet}")
    lowered = snippet.lower()
    if status == 413 or (400 <= status < 500 and any(m in lowered for m in CONTEXT_MARKERS)):
        raise JudgeContextTooLongError(f"the judge prompt is longer than the judge's context (HTTP {status}: {snippet})")
    if status in RETRYABLE_STATUS or status >= 500:
        raise RetryableJudgeError(str(status), f"HTTP {status}: {snippet}", retry_after_seconds(retry_after))
    raise JudgeBadRequestError(
        f"the judge refused the request with HTTP {status}: {snippet}. Check the judge model name and options"
    )


def parse_completion(body: dict[str, Any]) -> ChatReply:
    """The first choice of an OpenAI chat completion body; a body without one is a retryable fault."""
    try:
        choice = body["choices"][0]
        message = choice["message"]
        content = message.get("content")
    except (KeyError, IndexError, TypeError) as exc:
        raise RetryableJudgeError("malformed_body", f"the response has no choices[0].message ({exc!r})") from exc
    if isinstance(content, list):  # content parts
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ChatReply(content=content or "", finish_reason=choice.get("finish_reason"), usage=body.get("usage") or {})


async def list_models(url: str, api_key: str | None, timeout: float) -> list[str]:
    """The ids ``GET <base_url>/models`` lists, classified like a completion."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with httpx.AsyncClient(timeout=timeout) as client, asyncio.timeout(timeout):
            response = await client.get(url, headers=headers)
    except (TimeoutError, httpx.TimeoutException) as exc:
        raise RetryableJudgeError("timeout", f"{url}: no answer within {timeout}s") from exc
    except httpx.TransportError as exc:
        raise RetryableJudgeError("connection", f"{url}: {type(exc).__name__}: {exc}") from exc
    classify_status(response.status_code, response.text, response.headers.get("retry-after"))
    try:
        return [m["id"] for m in response.json()["data"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise RetryableJudgeError("malformed_body", f"{url}: not an OpenAI model list: {response.text[:200]!r}") from exc


class OpenAICompatibleTransport(JudgeTransport):
    """POSTs to ``<base_url>/chat/completions`` with httpx (vLLM, SGLang, OpenAI, a LiteLLM proxy, …)."""

    def __init__(self, base_url: str, *, max_connections: int = 64) -> None:
        self.base_url = openai_base_url(base_url)
        self._client = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        )

    async def complete(self, request: ChatRequest, *, api_key: str | None, timeout: float) -> ChatReply:
        body: dict[str, Any] = {
            "model": request.model,
            "messages": request.messages,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            **request.extra_body,
        }
        if request.response_format is not None:
            body["response_format"] = request.response_format
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        try:
            # httpx's timeout bounds each read; asyncio's bounds the whole call (a server may trickle bytes).
            async with asyncio.timeout(timeout):
                response = await self._client.post(f"{self.base_url}/chat/completions", json=body, headers=headers,
                                                   timeout=httpx.Timeout(timeout))
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise RetryableJudgeError("timeout", f"no answer within {timeout}s") from exc
        except httpx.TransportError as exc:
            raise RetryableJudgeError("connection", f"{type(exc).__name__}: {exc}") from exc
        classify_status(response.status_code, response.text, response.headers.get("retry-after"))
        try:
            data = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RetryableJudgeError("malformed_body", f"the response body is not JSON: {response.text[:200]!r}") from exc
        return parse_completion(data)

    async def aclose(self) -> None:
        await self._client.aclose()


class LitellmTransport(JudgeTransport):
    """Calls ``litellm.acompletion`` (any provider litellm knows: ``openai/…``, ``anthropic/…``, ``bedrock/…``).

    With a ``base_url`` and a model name without a litellm provider prefix the
    endpoint is treated as OpenAI-compatible. litellm's own retries are off:
    the client retries, so the stats count every attempt.
    """

    def __init__(self, base_url: str | None = None) -> None:
        self.base_url = openai_base_url(base_url) if base_url else None

    async def complete(self, request: ChatRequest, *, api_key: str | None, timeout: float) -> ChatReply:
        litellm = _litellm()
        kwargs: dict[str, Any] = {
            "model": request.model,
            "messages": request.messages,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "timeout": timeout,
            "num_retries": 0,
            "max_retries": 0,
        }
        if request.response_format is not None:
            kwargs["response_format"] = request.response_format
        if request.extra_body:
            kwargs["extra_body"] = request.extra_body
        if api_key:
            kwargs["api_key"] = api_key
        if self.base_url:
            kwargs["api_base"] = self.base_url
            if request.model.split("/", 1)[0] not in litellm.provider_list:
                kwargs["custom_llm_provider"] = "openai"
                kwargs.setdefault("api_key", "EMPTY")  # the OpenAI client insists on one
        try:
            async with asyncio.timeout(timeout):
                response = await litellm.acompletion(**kwargs)
        except TimeoutError as exc:
            raise RetryableJudgeError("timeout", f"no answer within {timeout}s") from exc
        except Exception as exc:
            raise _classify_litellm(litellm, exc) from exc
        return parse_completion(response.model_dump())


def _litellm() -> Any:
    # litellm would otherwise fetch its model price list from the internet on import.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    return litellm


def _classify_litellm(litellm: Any, exc: Exception) -> Exception:
    message = " ".join(str(exc).split())[:500]
    status = getattr(exc, "status_code", None)
    if isinstance(exc, litellm.ContextWindowExceededError):
        return JudgeContextTooLongError(f"the judge prompt is longer than the judge's context ({message})")
    if isinstance(exc, (litellm.AuthenticationError, litellm.PermissionDeniedError)):
        return KeyRejectedError(status or 401, message)
    if isinstance(exc, litellm.RateLimitError):
        headers = getattr(getattr(exc, "response", None), "headers", None) or {}
        return RetryableJudgeError("429", message, retry_after_seconds(headers.get("retry-after")))
    if isinstance(exc, litellm.Timeout):
        return RetryableJudgeError("timeout", message)
    if isinstance(exc, litellm.APIConnectionError):
        return RetryableJudgeError("connection", message)
    if isinstance(status, int):
        try:
            classify_status(status, message)
        except Exception as classified:
            return classified
    if isinstance(exc, (litellm.BadRequestError, litellm.NotFoundError, litellm.UnprocessableEntityError)):
        if any(m in message.lower() for m in CONTEXT_MARKERS):
            return JudgeContextTooLongError(f"the judge prompt is longer than the judge's context ({message})")
        return JudgeBadRequestError(f"the judge refused the request: {message}. Check the model name and options")
    import openai

    if isinstance(exc, openai.APIError):  # some other provider-side failure
        return RetryableJudgeError("error", f"{type(exc).__name__}: {message}")
    return exc  # not a provider error (a bug, a bad argument): let it surface as it is
