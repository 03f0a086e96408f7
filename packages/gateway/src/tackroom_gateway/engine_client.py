"""Async client for an engine's ``/v1/completions`` with token-id prompts (vLLM's extensions).

Every call sends ``prompt`` as token ids with ``return_token_ids: true`` and
``logprobs`` so the answer carries the exact completion ids and their logprobs.
Connection failures, 408/429/5xx answers and 200 answers that are not a
completion (not JSON, truncated) are retried, before any output reached the
caller, with exponential backoff that honours ``Retry-After`` (seconds or an
HTTP date, capped at ``retry_after_cap_s``); retrying stops after ``retries``
extra attempts or once the next wait would pass ``retry_budget_s`` since the
first. What is left is raised as a typed error:

* 429 after retries -> :class:`EngineRateLimitedError` (infra, HTTP 429)
* engine unreachable / died / 5xx after retries, or 401/403/404... -> :class:`EngineUnavailableError` (infra, 503)
* 200 that is not a completion after retries -> :class:`EngineBadResponseError` (infra, 502)
* no answer within the read timeout -> :class:`EngineTimeoutError` (infra, 504; not retried)
* context length exceeded -> :class:`ContextLengthExceededError` (model)
* any other 400/413/422 -> :class:`EngineRequestError` (model)

:meth:`EngineClient.probe` is the gateway's liveness check: one 1-token completion, on
its own small connection pool, without retries, bounded by a short timeout; it
answers what went wrong instead of raising.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

import httpcore
from pydantic import BaseModel, Field
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    stop_before_delay,
    wait_exponential,
)

from tackroom_gateway.errors import (
    EngineBadResponseError,
    EngineRateLimitedError,
    EngineRequestError,
    EngineTimeoutError,
    EngineUnavailableError,
    classify_engine_rejection,
)

T = TypeVar("T")


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
    """Extra attempts after a connection failure, 408/429/5xx or a garbled answer, before anything was returned."""
    backoff_s: float = 0.5
    """First wait of the exponential backoff (doubling, at most ``max_backoff_s``) when no ``Retry-After`` is given."""
    max_backoff_s: float = 8.0
    retry_after_cap_s: float = 30.0
    """The longest single wait an engine's ``Retry-After`` may ask for."""
    retry_budget_s: float = 60.0
    """Retrying stops once the next wait would end later than this many seconds after the first attempt began."""
    max_connections: int = 256
    """Engine requests in flight at once; kept in pools of 32 taken in turn, each with room for twice its share, so
    the engine may see up to twice this many connections (``ShardedPool``)."""
    probe_interval_s: float = 2.0
    """While requests wait on the engine and it has answered nothing for this long, the gateway sends it a
    liveness probe (a 1-token completion), one at a time; see ``PolicyGateway`` and the README's Errors."""
    probe_timeout_s: float = 5.0
    """A probe the engine has not answered within this many seconds failed (probes are never retried)."""


PROBE_USER = "tackroom-gateway-liveness-probe"
"""The ``user`` field of the gateway's liveness probes (a standard OpenAI field vLLM accepts and ignores),
so that engine doubles and logs can tell them from the agents' requests."""


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
    policy_version: int | None = None
    """The trained policy's version that sampled it, when the engine is a trainer's proxy that says so."""


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
    """An answer worth another attempt: 408/429/5xx, or a 200 that is not a completion."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.retry_after = retry_after


class _BadAnswer(_Retryable):
    def __init__(self, message: str) -> None:
        super().__init__(200, message)


# Failures where nothing reached the caller yet, so trying again is safe.
_RETRY_ON = (httpcore.ConnectError, httpcore.ConnectTimeout, httpcore.RemoteProtocolError, httpcore.ReadError, httpcore.WriteError, _Retryable)
_RETRY_STATUS = frozenset({408, 429})


def parse_retry_after(value: str | bytes | None, *, now: datetime | None = None) -> float | None:
    """``Retry-After`` as seconds from now: delta-seconds or an HTTP date; None when absent or unreadable."""
    if value is None:
        return None
    text = (value.decode("latin-1") if isinstance(value, bytes) else value).strip()
    if not text:
        return None
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def _header(resp: httpcore.Response, name: bytes) -> bytes | None:
    return next((v for k, v in resp.headers if k.lower() == name), None)


def _error_message(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        text = body.decode("utf-8", "replace")
        if "<" in text and ">" in text:  # an HTML error page from a proxy or a crashed server: its text only
            text = re.sub(r"<(script|style)\b.*?</\1>|<[^>]+>", " ", text, flags=re.DOTALL | re.IGNORECASE)
        return " ".join(text.split())[:500] or "(empty body)"
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            return str(err.get("message") or err)[:2000]
        return str(err)[:2000]
    return str(data)[:2000]


def _logprob_fields(lp: dict[str, Any] | None) -> tuple[list[float], list[str], list[dict[str, float]]]:
    if not lp:
        return [], [], []
    values = [float(x) if x is not None else 0.0 for x in lp.get("token_logprobs") or []]
    return values, list(lp.get("tokens") or []), [dict(t or {}) for t in lp.get("top_logprobs") or []]


class ShardedPool:
    """httpcore connection pools of at most ``SHARD`` connections each, taken in turn, ``max_connections`` in all.

    httpcore's pool does work quadratic in its connections on every request it assigns and every response it
    closes (its idle-connection check lists all connections for each idle one): at RL concurrency, 256 open
    engine requests, that was the largest single item in a profile of the gateway (benchmarks/gateway_overhead.py);
    plain requests went from 5.1 to 2.9 ms of gateway CPU each.
    Shards of ``SHARD`` keep each pool small; a shard that is full queues its request (``pool`` timeout), so each
    has room for twice its share, and the engine sees at most ``2 * max_connections`` connections at once."""

    SHARD = 32

    def __init__(self, max_connections: int, *, keepalive_expiry: float) -> None:
        shards = max(1, -(-max_connections // self.SHARD))
        size = min(max_connections, 2 * -(-max_connections // shards))
        self._pools = [httpcore.AsyncConnectionPool(max_connections=size, max_keepalive_connections=size,
                                                    keepalive_expiry=keepalive_expiry) for _ in range(shards)]
        self._turn = itertools.cycle(self._pools)

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        return await next(self._turn).handle_async_request(request)

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()


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
        # Idle connections are let go before the engine's own keep-alive timeout (uvicorn's, vLLM's server: 5 s)
        # closes them: a request sent just as the server closes its connection fails at once.
        self._pool = ShardedPool(settings.max_connections, keepalive_expiry=4.0)
        # Probes get their own connections: agents' requests filling the main pool must not look like a dead engine.
        # And a fresh one each (no keep-alive): a probe is never retried, so one lost to that close race would read
        # as a silent engine and turn every waiting trial into infra.
        self._probe_pool = httpcore.AsyncConnectionPool(max_connections=2, max_keepalive_connections=0)
        self.info: EngineInfo | None = None

    async def aclose(self) -> None:
        await self._pool.aclose()
        await self._probe_pool.aclose()

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        asked = getattr(exc, "retry_after", None)
        if asked is not None:
            return min(asked, self.settings.retry_after_cap_s)
        return wait_exponential(multiplier=self.settings.backoff_s, max=self.settings.max_backoff_s)(state)

    def _retrying(self, retry: bool = True) -> AsyncRetrying:
        if not retry:
            return AsyncRetrying(retry=retry_if_exception_type(_RETRY_ON), stop=stop_after_attempt(1), reraise=True)
        return AsyncRetrying(
            retry=retry_if_exception_type(_RETRY_ON),
            stop=stop_after_attempt(self.settings.retries + 1) | stop_before_delay(self.settings.retry_budget_s),
            wait=self._wait,
            reraise=True,
        )

    def _gave_up(self, exc: BaseException, attempts: int, started: float) -> EngineUnavailableError:
        """The typed error for the last retryable failure."""
        tried = f"after {attempts} attempt{'s' if attempts != 1 else ''} in {time.monotonic() - started:.1f}s"
        if isinstance(exc, _BadAnswer):
            return EngineBadResponseError(
                f"engine at {self.base_url} answered with something that is not a completion {tried}: {exc}"
            )
        if isinstance(exc, _Retryable) and exc.status == 429:
            return EngineRateLimitedError(
                f"engine at {self.base_url} kept answering 429 (rate limited) {tried}: {exc}; "
                "lower the run's concurrency or raise the engine's limits",
                retry_after=exc.retry_after,
            )
        return EngineUnavailableError(
            f"engine at {self.base_url} unavailable {tried}: {type(exc).__name__}: {exc}. "
            "Is it running? (`tackroom model status`)",
            retry_after=getattr(exc, "retry_after", None),
        )

    def _timeout(self, exc: BaseException) -> EngineTimeoutError:
        return EngineTimeoutError(
            f"engine at {self.base_url} sent nothing for {self.settings.timeouts.read:g}s "
            f"({type(exc).__name__}); the engine is overloaded or stuck, or raise the read timeout"
        )

    async def _send(self, method: str, path: str, content: bytes, answer: Callable[[httpcore.Response], Any],
                    *, retry: bool = True, pool: httpcore.AsyncConnectionPool | ShardedPool | None = None) -> Any:
        """One logical request with retries (``retry=False``: one attempt); ``answer`` turns a response into the
        result or raises.

        ``answer`` runs inside the attempt, so a retryable status or a garbled body it
        reports (``_Retryable``) is tried again; any other error it raises is final.
        """
        url = f"{self.base_url}/{path}"
        started = time.monotonic()
        attempts = 0
        pool = pool or self._pool
        try:
            async for attempt in self._retrying(retry):
                with attempt:
                    attempts += 1
                    headers = [*self._headers, (b"host", self._host), (b"content-length", str(len(content)).encode())]
                    resp = await pool.handle_async_request(
                        httpcore.Request(method, url, headers=headers, content=content, extensions={"timeout": self._timeouts})
                    )
                    return await answer(resp)
        except _RETRY_ON as exc:
            raise self._gave_up(exc, attempts, started) from exc
        except httpcore.TimeoutException as exc:
            raise self._timeout(exc) from exc
        except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
            raise self._gave_up(exc, attempts, started) from exc
        raise AssertionError("unreachable: tenacity either returns or raises")

    @staticmethod
    async def _check_status(resp: httpcore.Response) -> None:
        """Raise for a non-200 answer (closing it): retryable statuses as ``_Retryable``, others typed."""
        if resp.status == 200:
            return
        try:
            body = await resp.aread()
        finally:
            await resp.aclose()
        message = _error_message(body)
        if resp.status >= 500 or resp.status in _RETRY_STATUS:
            raise _Retryable(resp.status, message, parse_retry_after(_header(resp, b"retry-after")))
        raise classify_engine_rejection(resp.status, message)

    async def _call(self, method: str, path: str, payload: dict[str, Any] | None, parse: Callable[[Any], T],
                    **send: Any) -> T:
        """A JSON request whose JSON answer ``parse`` reads; a garbled answer is retried like a 5xx."""
        content = json.dumps(payload).encode() if payload is not None else b""

        async def answer(resp: httpcore.Response) -> T:
            await self._check_status(resp)
            try:
                body = await resp.aread()
            finally:
                await resp.aclose()
            try:
                data = json.loads(body)
            except ValueError as exc:
                raise _BadAnswer(f"not JSON ({exc}): {_error_message(body)[:200]}") from exc
            try:
                return parse(data)
            except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
                raise _BadAnswer(f"unexpected shape ({type(exc).__name__}: {exc}): {body[:200]!r}") from exc

        return await self._send(method, path, content, answer, **send)

    async def fetch_info(self) -> EngineInfo:
        """``GET /models``: the served model name and its context length."""
        data = await self._call("GET", "models", None, lambda d: list(d["data"]))
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
        return await self._call("POST", "completions", self._payload(body, stream=False), self._completion)

    async def score(self, prompt_ids: list[int], completion_ids: list[int], model: str | None = None) -> list[float]:
        """The model's own logprob of each of ``completion_ids`` after ``prompt_ids``: one prefill
        (``prompt_logprobs``), no sampling constraint. A turn sampled under structured outputs carries the logprobs
        of the constrained distribution (vLLM applies the grammar's mask before it computes them: a forced token
        reads 0.0); a trainer computes the unconstrained ones, and these match it."""
        if not completion_ids:
            return []
        body: dict[str, Any] = {"prompt": list(prompt_ids) + list(completion_ids), "max_tokens": 1, "temperature": 0.0,
                                "prompt_logprobs": 0}
        if model:
            body["model"] = model
        start = len(prompt_ids)

        def parse(data: Any) -> list[float]:
            entries = data["choices"][0]["prompt_logprobs"][start:]
            if len(entries) != len(completion_ids):
                raise ValueError(f"{len(entries)} prompt logprobs for {len(completion_ids)} completion tokens")
            return [float(entry[str(token)]["logprob"]) for token, entry in zip(completion_ids, entries)]

        return await self._call("POST", "completions", self._payload(body, stream=False), parse)

    async def probe(self, prompt_ids: list[int], timeout_s: float | None = None) -> str | None:
        """Ask the engine for one token of ``prompt_ids``: None when it answered with a completion within
        ``timeout_s`` (default ``probe_timeout_s``), else what went wrong. One attempt, on the probe pool,
        never raises (but cancellation).

        Why a completion and not ``/health``: vLLM's ``/health`` answers from the API server while the
        engine core is alive, also when its scheduler makes no progress; a completion, however short,
        only comes back when the engine schedules and runs work.
        """
        limit = self.settings.probe_timeout_s if timeout_s is None else timeout_s
        payload = self._payload({"prompt": list(prompt_ids), "max_tokens": 1, "temperature": 0.0, "user": PROBE_USER},
                                stream=False)
        try:
            async with asyncio.timeout(limit) as deadline:
                await self._call("POST", "completions", payload, self._completion, retry=False, pool=self._probe_pool)
        except TimeoutError as exc:
            return f"no answer within {limit:g}s" if deadline.expired() else f"{type(exc).__name__}: {exc}"
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    def _completion(self, data: Any) -> EngineCompletion:
        choice = data["choices"][0]
        if choice.get("token_ids") is None:
            raise EngineBadResponseError(
                f"engine at {self.base_url} returned no token_ids; it must accept `return_token_ids` on "
                "/v1/completions (vLLM >= 0.10)"
            )
        values, tokens, tops = _logprob_fields(choice.get("logprobs"))
        ids = [int(i) for i in choice["token_ids"]]
        return EngineCompletion.model_construct(
            prompt_ids=choice.get("prompt_token_ids"),
            completion_ids=ids,
            logprobs=values if len(values) == len(ids) else None,
            tokens=tokens or None,
            top_logprobs=tops or None,
            text=str(choice.get("text") or ""),
            finish_reason=choice.get("finish_reason"),
            stop_reason=choice.get("stop_reason"),
            policy_version=data.get("policy_version"),
        )

    async def stream(self, body: dict[str, Any]) -> AsyncIterator[EngineChunk]:
        """POST ``/completions`` with ``stream: true``; yield chunks as the engine sends them.

        Retries happen only until the engine answers 200; a failure after that is
        raised as :class:`EngineUnavailableError` (the caller may have forwarded output).
        """
        content = json.dumps(self._payload(body, stream=True)).encode()

        async def opened(resp: httpcore.Response) -> httpcore.Response:
            await self._check_status(resp)
            kind = (_header(resp, b"content-type") or b"").split(b";")[0].strip().lower()
            if kind != b"text/event-stream":  # an error page or a plain JSON body instead of a stream
                try:
                    body = await resp.aread()
                finally:
                    await resp.aclose()
                raise _BadAnswer(f"a {kind.decode('latin-1') or 'untyped'} answer instead of an event stream: "
                                 f"{_error_message(body)[:200]}")
            return resp

        resp: httpcore.Response = await self._send("POST", "completions", content, opened)
        try:
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
                    try:
                        obj = json.loads(item)
                    except ValueError as exc:
                        raise EngineBadResponseError(
                            f"engine at {self.base_url} sent a stream event that is not JSON: {item[:200]!r}"
                        ) from exc
                    for chunk in self._chunks(obj):
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
    def _chunks(obj: Any) -> list[EngineChunk]:
        if not isinstance(obj, dict):
            raise EngineBadResponseError(f"engine sent a stream event that is not an object: {str(obj)[:200]}")
        if "error" in obj:
            err = obj["error"]
            msg = err.get("message", str(err)) if isinstance(err, dict) else str(err)
            code = str(err.get("code", "")) if isinstance(err, dict) else ""
            status = int(code) if code.isdigit() else 500
            if status >= 500 or status in _RETRY_STATUS:
                raise EngineUnavailableError(f"engine failed mid-stream (HTTP {status}): {msg}")
            raise classify_engine_rejection(status, msg)
        out = []
        try:
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
        except (AttributeError, TypeError, ValueError) as exc:
            raise EngineBadResponseError(f"engine sent a stream event of an unexpected shape: {str(obj)[:200]}") from exc
        return out
