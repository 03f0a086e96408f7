"""Async client for an engine's ``/v1/completions`` with token-id prompts (vLLM's extensions).

Every call sends ``prompt`` as token ids with ``return_token_ids: true`` and
``logprobs`` so the answer carries the exact completion ids and their logprobs.
Connection failures and 5xx answers are retried (before any output reached the
caller) with exponential backoff; what is left is raised as a typed error:

* engine unreachable / died / 5xx after retries -> :class:`EngineUnavailableError` (infra)
* no answer within the read timeout -> :class:`EngineTimeoutError` (infra)
* context length exceeded -> :class:`ContextLengthExceededError` (model)
* any other 4xx -> :class:`EngineRequestError` (model)
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpcore
from pydantic import BaseModel, Field
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from tackroom.gateway.errors import (
    EngineRequestError,
    EngineTimeoutError,
    EngineUnavailableError,
    classify_engine_rejection,
)


class EngineTimeouts(BaseModel):
    """Seconds. ``read`` bounds the wait for each piece of an answer (a whole non-streamed completion)."""

    connect: float = 10.0
    read: float = 600.0
    write: float = 60.0
    pool: float = 60.0


class EngineSettings(BaseModel):
    """Where the engine is and how hard to try."""

    base_url: str
    """The engine's OpenAI base URL, ending in ``/v1``."""
    model: str | None = None
    """Served model name; discovered from ``/v1/models`` when not given."""
    api_key: str = "EMPTY"
    timeouts: EngineTimeouts = Field(default_factory=EngineTimeouts)
    retries: int = 3
    """Extra attempts after a connection failure or 5xx, before anything was returned."""
    backoff_s: float = 0.5
    max_connections: int = 256


class EngineInfo(BaseModel):
    model: str
    max_model_len: int | None = None


class EngineCompletion(BaseModel):
    """One finished completion: the exact ids the engine consumed and produced."""

    prompt_ids: list[int] | None = None
    completion_ids: list[int]
    logprobs: list[float] | None = None
    tokens: list[str] | None = None
    top_logprobs: list[dict[str, float]] | None = None
    text: str
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class EngineChunk(BaseModel):
    """One streamed piece: deltas of text, ids and logprobs; ``finish_reason`` on the last."""

    text: str = ""
    token_ids: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    tokens: list[str] = Field(default_factory=list)
    top_logprobs: list[dict[str, float]] = Field(default_factory=list)
    prompt_ids: list[int] | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class _Retryable(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


# Failures where nothing reached the caller yet, so trying again is safe.
_RETRY_ON = (httpcore.ConnectError, httpcore.ConnectTimeout, httpcore.RemoteProtocolError, httpcore.ReadError, httpcore.WriteError, _Retryable)


def _error_message(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")[:2000]
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)
    return str(data)


def _logprob_fields(lp: dict[str, Any] | None) -> tuple[list[float], list[str], list[dict[str, float]]]:
    if not lp:
        return [], [], []
    values = [float(x) if x is not None else 0.0 for x in lp.get("token_logprobs") or []]
    return values, list(lp.get("tokens") or []), [dict(t or {}) for t in lp.get("top_logprobs") or []]


class EngineClient:
    """One pooled HTTP/1.1 client per engine; safe to share between sessions and tasks.

    Built on httpcore (httpx's transport) directly: the gateway sits on every model
    call, and httpx's per-request URL/cookie handling costs more than the hop itself.
    """

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        t = settings.timeouts
        self.base_url = settings.base_url.rstrip("/")
        url = httpcore.URL(self.base_url)
        self._host = url.host + (b":%d" % url.port if url.port else b"")
        self._timeouts = {"connect": t.connect, "read": t.read, "write": t.write, "pool": t.pool}
        self._headers = [
            (b"content-type", b"application/json"),
            (b"authorization", f"Bearer {settings.api_key}".encode()),
        ]
        self._pool = httpcore.AsyncConnectionPool(
            max_connections=settings.max_connections, max_keepalive_connections=settings.max_connections, keepalive_expiry=60.0
        )
        self.info: EngineInfo | None = None

    async def aclose(self) -> None:
        await self._pool.aclose()

    def _retrying(self) -> AsyncRetrying:
        return AsyncRetrying(
            retry=retry_if_exception_type(_RETRY_ON),
            stop=stop_after_attempt(self.settings.retries + 1),
            wait=wait_exponential(multiplier=self.settings.backoff_s, max=8.0),
            reraise=True,
        )

    def _unavailable(self, exc: BaseException) -> EngineUnavailableError:
        return EngineUnavailableError(
            f"engine at {self.base_url} unavailable after {self.settings.retries + 1} attempts: "
            f"{type(exc).__name__}: {exc}. Is it running? (`tackroom model status`)"
        )

    def _timeout(self, exc: BaseException) -> EngineTimeoutError:
        return EngineTimeoutError(
            f"engine at {self.base_url} sent nothing for {self.settings.timeouts.read:.0f}s "
            f"({type(exc).__name__}); the engine is overloaded or stuck, or raise the read timeout"
        )

    async def _call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> tuple[int, bytes]:
        """One request with retries on connection failures and 5xx; returns (status, body)."""
        content = json.dumps(payload).encode() if payload is not None else b""
        url = f"{self.base_url}/{path}"
        try:
            async for attempt in self._retrying():
                with attempt:
                    resp = await self._pool.request(
                        method, url, headers=self._headers, content=content, extensions={"timeout": self._timeouts}
                    )
                    if resp.status >= 500:
                        raise _Retryable(resp.status, _error_message(resp.content))
        except _RETRY_ON as exc:
            raise self._unavailable(exc) from exc
        except httpcore.TimeoutException as exc:
            raise self._timeout(exc) from exc
        except httpcore.NetworkError as exc:
            raise self._unavailable(exc) from exc
        if resp.status != 200:
            raise classify_engine_rejection(resp.status, _error_message(resp.content))
        return resp.status, resp.content

    async def fetch_info(self) -> EngineInfo:
        """``GET /models``: the served model name and its context length."""
        _, body = await self._call("GET", "models")
        data = json.loads(body).get("data") or []
        wanted = self.settings.model
        entry = next((d for d in data if d.get("id") == wanted), None) if wanted else (data[0] if data else None)
        if entry is None:
            served = ", ".join(d.get("id", "?") for d in data) or "none"
            raise EngineRequestError(f"engine at {self.base_url} serves {served}, not {wanted!r}; pass --model with one of them")
        self.info = EngineInfo(model=entry["id"], max_model_len=entry.get("max_model_len"))
        return self.info

    def _payload(self, body: dict[str, Any], *, stream: bool) -> dict[str, Any]:
        payload = dict(body)
        payload.setdefault("model", self.info.model if self.info else self.settings.model)
        payload["return_token_ids"] = True
        if payload.get("logprobs") is None:
            payload["logprobs"] = 0
        payload["stream"] = stream
        if stream:
            payload["stream_options"] = {"include_usage": False}
        return payload

    async def complete(self, body: dict[str, Any]) -> EngineCompletion:
        """POST ``/completions`` and wait for the whole answer."""
        _, raw = await self._call("POST", "completions", self._payload(body, stream=False))
        choice = json.loads(raw)["choices"][0]
        if choice.get("token_ids") is None:
            raise EngineRequestError(
                "engine returned no token_ids; it must accept `return_token_ids` on /v1/completions (vLLM >= 0.10)"
            )
        values, tokens, tops = _logprob_fields(choice.get("logprobs"))
        ids = list(choice["token_ids"])
        return EngineCompletion.model_construct(
            prompt_ids=choice.get("prompt_token_ids"),
            completion_ids=ids,
            logprobs=values if len(values) == len(ids) else None,
            tokens=tokens or None,
            top_logprobs=tops or None,
            text=choice.get("text") or "",
            finish_reason=choice.get("finish_reason"),
            stop_reason=choice.get("stop_reason"),
        )

    async def stream(self, body: dict[str, Any]) -> AsyncIterator[EngineChunk]:
        """POST ``/completions`` with ``stream: true``; yield chunks as the engine sends them.

        Retries happen only until the engine answers 200; a failure after that is
        raised as :class:`EngineUnavailableError` (the caller may have forwarded output).
        """
        content = json.dumps(self._payload(body, stream=True)).encode()
        url = f"{self.base_url}/completions"
        resp: httpcore.Response | None = None
        try:
            async for attempt in self._retrying():
                with attempt:
                    headers = [*self._headers, (b"host", self._host), (b"content-length", str(len(content)).encode())]
                    resp = await self._pool.handle_async_request(
                        httpcore.Request("POST", url, headers=headers, content=content, extensions={"timeout": self._timeouts})
                    )
                    if resp.status >= 500:
                        err = await resp.aread()
                        await resp.aclose()
                        raise _Retryable(resp.status, _error_message(err))
        except _RETRY_ON as exc:
            raise self._unavailable(exc) from exc
        except httpcore.TimeoutException as exc:
            raise self._timeout(exc) from exc
        except httpcore.NetworkError as exc:
            raise self._unavailable(exc) from exc
        assert resp is not None
        try:
            if resp.status != 200:
                raise classify_engine_rejection(resp.status, _error_message(await resp.aread()))
            finished = False
            buffer = b""
            async for data in resp.aiter_stream():
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line.startswith(b"data:"):
                        continue
                    item = line[5:].strip()
                    if item == b"[DONE]":
                        finished = True
                        break
                    for chunk in self._chunks(json.loads(item)):
                        yield chunk
                if finished:
                    break
            if not finished:
                raise EngineUnavailableError(f"engine at {self.base_url} closed the stream before it finished (did it die?)")
        except httpcore.TimeoutException as exc:
            raise self._timeout(exc) from exc
        except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
            raise EngineUnavailableError(f"engine at {self.base_url} failed mid-stream: {type(exc).__name__}: {exc}") from exc
        finally:
            await resp.aclose()

    @staticmethod
    def _chunks(obj: dict[str, Any]) -> list[EngineChunk]:
        if "error" in obj:
            err = obj["error"]
            msg = err.get("message", str(err)) if isinstance(err, dict) else str(err)
            code = str(err.get("code", "")) if isinstance(err, dict) else ""
            status = int(code) if code.isdigit() else 500
            if status >= 500:
                raise EngineUnavailableError(f"engine failed mid-stream: {msg}")
            raise classify_engine_rejection(status, msg)
        out = []
        for choice in obj.get("choices") or []:
            values, tokens, tops = _logprob_fields(choice.get("logprobs"))
            out.append(
                EngineChunk.model_construct(
                    text=choice.get("text") or "",
                    token_ids=list(choice.get("token_ids") or []),
                    logprobs=values,
                    tokens=tokens,
                    top_logprobs=tops,
                    prompt_ids=choice.get("prompt_token_ids"),
                    finish_reason=choice.get("finish_reason"),
                    stop_reason=choice.get("stop_reason"),
                )
            )
        return out
