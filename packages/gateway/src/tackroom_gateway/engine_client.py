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
* no answer within the read timeout, or no free connection within the pool timeout -> :class:`EngineTimeoutError`
  (infra, 504; not retried)
* context length exceeded -> :class:`ContextLengthExceededError` (model)
* any other 400/413/422 -> :class:`EngineRequestError` (model)

:meth:`EngineClient.probe` is the gateway's liveness check: one 1-token completion, on
its own small connection pool, without retries, bounded by a short timeout; it
answers what went wrong instead of raising.

The transport is aiohttp (its HTTP parser is C): the gateway sits on every model call, and the engine hop on
httpcore (h11, anyio) cost several times the CPU per request (packages/gateway/README.md, "At RL concurrency").
``EngineTimeouts`` maps onto it as follows: ``connect`` bounds resolving and connecting (aiohttp's ``connect`` and
``sock_connect``); ``read`` bounds each wait for a piece of the answer (``sock_read``: the head, each body read, the
gap between stream events); ``pool`` bounds the wait for one of ``max_connections`` request slots (the client's own,
aiohttp's connector is unlimited behind it). aiohttp has no write timeout: the request is written beside the wait
for the answer, with ``read`` already running, so an engine that never takes the request ends as a read timeout
(``write`` is kept for compatibility and bounds nothing). One thing aiohttp adds: a ``GET`` (``/models``) whose
kept-alive connection turns out closed is sent again at once on a new one, before the retries above.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError
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
    """Seconds. ``read`` bounds the wait for each piece of an answer (a whole non-streamed completion); ``pool`` the
    wait for a free request slot; ``write`` bounds nothing on aiohttp (a stuck write ends as a read timeout; see the
    module's docstring)."""

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
    """Engine requests in flight at once (a request past it waits up to ``timeouts.pool`` for a slot), and so the
    most connections the engine sees from the gateway's requests (probes have their own two)."""
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
    policy_version: int | None = None
    """The policy version its tokens were sampled under, where the gateway knows it (its weight gate's)."""


class _Retryable(Exception):
    """An answer worth another attempt: 408/429/5xx, or a 200 that is not a completion."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.retry_after = retry_after


class _BadAnswer(_Retryable):
    def __init__(self, message: str) -> None:
        super().__init__(200, message)


class _PoolTimeout(TimeoutError):
    """No request slot came free within ``timeouts.pool`` (all ``max_connections`` in flight)."""


# Failures where nothing reached the caller yet, so trying again is safe: the connection could not be made (refused,
# timed out), the engine closed or reset it, or sent something that is not HTTP or a body cut short.
_RETRY_ON = (
    aiohttp.ClientOSError,  # refused / unreachable (ClientConnectorError), reset while reading or writing
    aiohttp.ClientConnectionResetError,  # a write to a connection the engine closed
    aiohttp.ServerDisconnectedError,  # closed before the answer
    aiohttp.ConnectionTimeoutError,  # no connection within ``connect``
    aiohttp.ClientPayloadError,  # a body cut short
    aiohttp.ClientResponseError,  # not HTTP (the parser's error, as aiohttp raises it)
    HttpProcessingError,
    _Retryable,
)
# Failures of the transport that are final (after the retryable ones above): a timeout reading the answer or waiting
# for a slot is EngineTimeoutError, anything else EngineUnavailableError.
_TIMEOUTS = (aiohttp.ServerTimeoutError, _PoolTimeout)
_TRANSPORT = (aiohttp.ClientError, HttpProcessingError)
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


class EngineClient:
    """One pooled HTTP/1.1 client per engine; safe to share between sessions and tasks.

    Built on aiohttp (a C HTTP parser): the gateway sits on every model call, so the hop's CPU is the gateway's.
    Its sessions are opened on first use, in the running event loop (the client may be made outside one).
    """

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        t = settings.timeouts
        self.base_url = settings.base_url.rstrip("/")
        self._client_timeout = aiohttp.ClientTimeout(total=None, connect=t.connect, sock_connect=t.connect, sock_read=t.read)
        self._headers = {"Content-Type": "application/json", "Authorization": f"Bearer {settings.api_key}"}
        self._slots = asyncio.Semaphore(max(1, settings.max_connections))
        self._session: aiohttp.ClientSession | None = None
        self._probe_session: aiohttp.ClientSession | None = None
        self.info: EngineInfo | None = None

    def _open(self, *, probe: bool) -> aiohttp.ClientSession:
        if probe:
            # Probes get their own connections: agents' requests filling the main pool must not look like a dead
            # engine. And a fresh one each (no keep-alive): a probe is never retried, so one lost to the race of the
            # engine closing an idle connection would read as a silent engine and turn every waiting trial into infra.
            connector = aiohttp.TCPConnector(limit=2, force_close=True)
        else:
            # Unlimited: the request slots (``max_connections``) bound the connections in use. Idle ones are let go
            # before the engine's own keep-alive timeout (uvicorn's, vLLM's server: 5 s) closes them: a request sent
            # just as the server closes its connection fails at once.
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=4.0)
        # No Accept-Encoding (as before, on httpcore): the engine's answers come uncompressed.
        return aiohttp.ClientSession(connector=connector, timeout=self._client_timeout, headers=self._headers,
                                     skip_auto_headers=("Accept-Encoding",), cookie_jar=aiohttp.DummyCookieJar())

    async def aclose(self) -> None:
        """Close both sessions; one cancelled or failing to close does not keep the other open."""
        sessions = [s for s in (self._session, self._probe_session) if s is not None]
        self._session = self._probe_session = None
        for session in sessions:
            try:
                await asyncio.shield(session.close())
            except Exception:  # a connection that fails to close cleanly is closed all the same
                continue

    def _wait(self, state: RetryCallState) -> float:
        """The wait before the next attempt: the engine's ``Retry-After`` (capped), else exponential backoff."""
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
        if isinstance(exc, _PoolTimeout):
            return EngineTimeoutError(f"engine at {self.base_url}: {exc}; the engine is overloaded or stuck, "
                                      "or raise max_connections or the pool timeout")
        return EngineTimeoutError(
            f"engine at {self.base_url} sent nothing for {self.settings.timeouts.read:g}s "
            f"({type(exc).__name__}); the engine is overloaded or stuck, or raise the read timeout"
        )

    async def _acquire(self) -> None:
        """Take a request slot, waiting at most ``timeouts.pool``."""
        if not self._slots.locked():
            await self._slots.acquire()  # free: no wait
            return
        try:
            async with asyncio.timeout(self.settings.timeouts.pool):
                await self._slots.acquire()
        except TimeoutError as exc:
            raise _PoolTimeout(f"no free connection within {self.settings.timeouts.pool:g}s "
                               f"({self.settings.max_connections} requests in flight)") from exc

    async def _send(self, method: str, path: str, content: bytes | None,
                    answer: Callable[[aiohttp.ClientResponse], Awaitable[T]], *, retry: bool = True, probe: bool = False,
                    hold: bool = False) -> T:
        """One logical request with retries (``retry=False``: one attempt); ``answer`` turns a response into the
        result or raises.

        ``answer`` runs inside the attempt, so a retryable status or a garbled body it reports (``_Retryable``)
        is tried again; any other error it raises is final. Connection failures, 408/429/5xx and garbled answers
        are retried up to ``retries`` times, with exponential backoff or the engine's ``Retry-After`` (capped),
        stopping early once the next wait would end ``retry_budget_s`` after the first attempt began.
        ``hold``: the response stays open after ``answer`` (a stream), holding its request slot; the caller
        releases both (:meth:`_release`). On failure they are released here.
        """
        url = f"{self.base_url}/{path}"
        started = time.monotonic()
        attempts = 0
        if probe:
            session = self._probe_session or self._set_session(probe=True)
        else:
            session = self._session or self._set_session(probe=False)
        try:
            async for attempt in self._retrying(retry):
                with attempt:
                    attempts += 1
                    return await self._attempt(session, method, url, content, answer, probe=probe, hold=hold)
        except _RETRY_ON as exc:
            raise self._gave_up(exc, attempts, started) from exc
        except _TIMEOUTS as exc:
            raise self._timeout(exc) from exc
        except _TRANSPORT as exc:
            raise self._gave_up(exc, attempts, started) from exc
        raise AssertionError("unreachable: tenacity re-raises the last failure")

    async def _attempt(self, session: aiohttp.ClientSession, method: str, url: str, content: bytes | None,
                       answer: Callable[[aiohttp.ClientResponse], Awaitable[T]], *, probe: bool, hold: bool) -> T:
        """One attempt: a request slot (not for a probe), the request, ``answer``; the slot and the response are
        released here unless ``hold`` passes them to the caller."""
        slot = False
        try:
            if not probe:
                await self._acquire()
                slot = True
            resp = await session.request(method, url, data=content, allow_redirects=False)
            try:
                result = await answer(resp)
            except BaseException:
                resp.release()  # back to the pool when its answer was read whole, else closed
                raise
            if hold:
                slot = False  # the caller's now, with the response
            else:
                resp.release()
            return result
        finally:
            if slot:
                self._slots.release()

    def _set_session(self, *, probe: bool) -> aiohttp.ClientSession:
        session = self._open(probe=probe)
        if probe:
            self._probe_session = session
        else:
            self._session = session
        return session

    def _release(self, resp: aiohttp.ClientResponse, *, finished: bool) -> None:
        """End a held response (:meth:`_send`'s ``hold``): its connection back to the pool when the answer was read
        to its end, else closed (the engine sees its client go away); and its request slot."""
        try:
            if finished:
                resp.release()
            else:
                resp.close()
        finally:
            self._slots.release()

    @staticmethod
    async def _check_status(resp: aiohttp.ClientResponse) -> None:
        """Raise for a non-200 answer: retryable statuses as ``_Retryable``, others typed."""
        if resp.status == 200:
            return
        body = await resp.read()
        message = _error_message(body)
        if resp.status >= 500 or resp.status in _RETRY_STATUS:
            raise _Retryable(resp.status, message, parse_retry_after(resp.headers.get("Retry-After")))
        raise classify_engine_rejection(resp.status, message)

    async def _call(self, method: str, path: str, payload: dict[str, Any] | None, parse: Callable[[Any], T],
                    **send: Any) -> T:
        """A JSON request whose JSON answer ``parse`` reads; a garbled answer is retried like a 5xx."""
        content = json.dumps(payload).encode() if payload is not None else None

        async def answer(resp: aiohttp.ClientResponse) -> T:
            await self._check_status(resp)
            body = await resp.read()
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
                await self._call("POST", "completions", payload, self._completion, retry=False, probe=True)
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

        async def opened(resp: aiohttp.ClientResponse) -> aiohttp.ClientResponse:
            await self._check_status(resp)
            kind = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
            if kind != "text/event-stream":  # an error page or a plain JSON body instead of a stream
                body = await resp.read()
                raise _BadAnswer(f"a {kind or 'untyped'} answer instead of an event stream: "
                                 f"{_error_message(body)[:200]}")
            return resp

        resp = await self._send("POST", "completions", content, opened, hold=True)
        finished = False
        try:
            buffer = b""
            async for data in resp.content.iter_any():
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
            if not resp.content.at_eof():
                # the body's last chunk is sent right after [DONE]: one turn of the event loop reads it when it has
                # come, and the connection can be kept (else it is closed, not waited for)
                await asyncio.sleep(0)
        except aiohttp.ServerTimeoutError as exc:
            raise self._timeout(exc) from exc
        except _TRANSPORT as exc:
            raise EngineUnavailableError(f"engine at {self.base_url} failed mid-stream: {type(exc).__name__}: {exc}") from exc
        finally:
            # [DONE] is the last event: the connection goes back to the pool once the body's end came with it
            self._release(resp, finished=finished and resp.content.at_eof())

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
