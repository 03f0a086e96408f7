"""The judge client: one per endpoint per event loop, shared by every trial in the process.

It owns what must be shared to hold up at hundreds of concurrent rollouts: the
concurrency limit (an ``asyncio.Semaphore`` held only while a request is in
flight, never while backing off), the API-key rotation, the connection pool and
the counters. Each verdict is retried with tenacity — exponential backoff with
full jitter (``Retry-After`` respected) on 429/5xx/timeouts/dropped
connections, the next key at once on 401/403 — and re-asked a bounded number
of times when the reply is not a valid verdict.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from dataclasses import dataclass, field

from pydantic import BaseModel, Field
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from tackroom_rubric_judge.errors import (
    JudgeAuthError,
    JudgeBadRequestError,
    JudgeInvalidOutputError,
    JudgeUnavailableError,
    KeyRejectedError,
    RetryableJudgeError,
)
from tackroom_rubric_judge.keys import KeyPool
from tackroom_rubric_judge.prompt import reask_messages
from tackroom_rubric_judge.transport import (
    ChatReply,
    ChatRequest,
    JudgeTransport,
    LitellmTransport,
    OpenAICompatibleTransport,
    list_models,
    openai_base_url,
)
from tackroom_rubric_judge.verdict import InvalidVerdict, Verdict, parse_verdict


class RetryPolicy(BaseModel):
    """How hard one verdict is tried."""

    max_attempts: int = Field(default=6, ge=1, description="Requests per verdict (key rejections not counted)")
    backoff_initial_sec: float = Field(default=1.0, gt=0, description="Backoff scale: waits are uniform in [0, s*2^n]")
    backoff_max_sec: float = Field(default=30.0, gt=0, description="Cap of one wait (also caps Retry-After)")
    request_timeout_sec: float = Field(default=60.0, gt=0, description="Limit of one request")
    max_total_sec: float = Field(default=300.0, gt=0, description="Give up on a verdict after this long, waits included")
    max_reasks: int = Field(default=2, ge=0, description="Re-asks after a reply that is not a valid verdict")


class CallRecord(BaseModel):
    """What one verdict took: attempts, retries by reason, re-asks, which keys, how long."""

    attempts: int = 0
    retries: dict[str, int] = Field(default_factory=dict)
    """Failed requests by reason (``429``, ``500``, ``timeout``, ``connection``, ``malformed_body``, ``auth`` …)."""
    reasks: int = 0
    keys: list[str] = Field(default_factory=list)
    """Key label per request (``key#0`` …), in order."""
    waits: list[float] = Field(default_factory=list)
    """Backoff waits in seconds, in order."""
    queued_s: float = 0.0
    """Time spent waiting for the concurrency limit."""
    latency_s: float = 0.0


class JudgeStats(BaseModel):
    """Counters of one shared client, across every trial that used it."""

    verdicts: int = 0
    failures: int = 0
    attempts: int = 0
    reasks: int = 0
    retries: dict[str, int] = Field(default_factory=dict)
    key_uses: dict[str, int] = Field(default_factory=dict)
    max_in_flight: int = 0

    @property
    def total_retries(self) -> int:
        return sum(self.retries.values())


@dataclass(frozen=True)
class JudgeEndpoint:
    """What identifies a shared client: where the judge is, how it is reached, the keys and the limit."""

    transport: str
    base_url: str | None
    max_concurrency: int
    keys: tuple[str, ...] = field(default=(), repr=False)

    def describe(self) -> str:
        """For messages: the URL's userinfo (``user:password@``) is masked."""
        return f"{self.transport} judge at {self.shown_url}" if self.base_url else f"{self.transport} judge"

    @property
    def shown_url(self) -> str | None:
        """``base_url`` as it may be written (result details, errors): without its userinfo."""
        from tackroom.services import redact_url

        return redact_url(self.base_url) if self.base_url else None


class JudgeClient:
    """Asks for verdicts; see the module docstring. Get the shared one with :func:`shared_client`."""

    def __init__(self, endpoint: JudgeEndpoint, transport: JudgeTransport) -> None:
        self.endpoint = endpoint
        self.transport = transport
        self.keys = KeyPool(list(endpoint.keys))
        self.semaphore = asyncio.Semaphore(endpoint.max_concurrency)
        self.stats = JudgeStats()
        self._in_flight = 0
        self._served_model: str | None = None
        self._served_model_lock = asyncio.Lock()

    async def served_model(self, policy: RetryPolicy) -> str:
        """The first model ``<base_url>/models`` lists (cached), for a judge configured without a model name.

        Trials starting together share one lookup.
        """
        async with self._served_model_lock:
            if self._served_model is None:
                self._served_model = await self._list_first_model(policy)
        return self._served_model

    async def _list_first_model(self, policy: RetryPolicy) -> str:
        if not self.endpoint.base_url:
            raise JudgeBadRequestError(
                "no judge model is configured; set model (e.g. 'openai/gpt-4.1-mini') or $TACKROOM_JUDGE_MODEL, "
                "or base_url to an endpoint whose /models lists one"
            )
        url = openai_base_url(self.endpoint.base_url) + "/models"
        retrying = AsyncRetrying(
            stop=stop_after_attempt(policy.max_attempts), reraise=True,
            wait=wait_random_exponential(multiplier=policy.backoff_initial_sec, max=policy.backoff_max_sec),
            retry=retry_if_exception_type(RetryableJudgeError),
        )
        try:
            async for attempt in retrying:
                with attempt:
                    _, key = self.keys.take()
                    ids = await list_models(url, key, policy.request_timeout_sec)
        except RetryableJudgeError as exc:
            raise JudgeUnavailableError(f"could not list the models of the {self.endpoint.describe()}: {exc}") from exc
        except KeyRejectedError as exc:
            raise JudgeAuthError(f"the {self.endpoint.describe()} rejected the API key when listing models: {exc}") from exc
        if not ids:
            raise JudgeBadRequestError(f"the {self.endpoint.describe()} serves no model; set model explicitly")
        return ids[0]

    async def verdict(self, request: ChatRequest, policy: RetryPolicy) -> tuple[Verdict, CallRecord]:
        """A parsed verdict for ``request``. Raises a :class:`~tackroom_rubric_judge.errors.JudgeError` otherwise."""
        record = CallRecord()
        started = time.monotonic()
        messages = request.messages
        budget = request.max_tokens
        try:
            for ask in range(policy.max_reasks + 1):
                attempt = request.model_copy(update={"messages": messages, "max_tokens": budget})
                reply = await self._complete(attempt, policy, record)
                try:
                    verdict = parse_verdict(reply.content)
                except InvalidVerdict as exc:
                    problem = str(exc)
                    if reply.finish_reason == "length":
                        problem += f" (the reply was cut off at {budget} tokens; keep the rationale short)"
                    if ask == policy.max_reasks:
                        raise JudgeInvalidOutputError(
                            f"the {self.endpoint.describe()} gave no valid verdict in {ask + 1} replies; last problem: "
                            f"{problem}; last reply: {reply.content[:300]!r}. Use a model that follows JSON "
                            "instructions, structured_output = 'json_schema', or a larger max_tokens"
                        ) from exc
                    record.reasks += 1
                    self.stats.reasks += 1
                    messages = reask_messages(request.messages, reply.content, problem)
                    if reply.finish_reason == "length":  # the same budget would cut it again
                        budget = min(budget * 2, request.max_tokens * 4)
                    continue
                self.stats.verdicts += 1
                return verdict, record
            raise AssertionError("unreachable")
        except Exception:
            self.stats.failures += 1
            raise
        finally:
            record.latency_s = round(time.monotonic() - started, 4)

    async def _complete(self, request: ChatRequest, policy: RetryPolicy, record: CallRecord) -> ChatReply:
        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            if isinstance(exc, KeyRejectedError):
                return 0.0  # another key, right away
            seconds = wait_random_exponential(multiplier=policy.backoff_initial_sec, max=policy.backoff_max_sec)(state)
            if isinstance(exc, RetryableJudgeError) and exc.retry_after:
                seconds = max(seconds, min(exc.retry_after, policy.backoff_max_sec))
            record.waits.append(round(seconds, 4))
            return seconds

        # The attempt budget is per request: a re-ask starts a fresh one. Key rejections do not count.
        attempts_before, auth_before = record.attempts, record.retries.get("auth", 0)

        def stop(state: RetryCallState) -> bool:
            counted = (record.attempts - attempts_before) - (record.retries.get("auth", 0) - auth_before)
            return counted >= policy.max_attempts or state.seconds_since_start >= policy.max_total_sec

        retrying = AsyncRetrying(stop=stop, wait=wait, reraise=True,
                                 retry=retry_if_exception_type((RetryableJudgeError, KeyRejectedError)))
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._attempt(request, policy, record)
        except RetryableJudgeError as exc:
            raise JudgeUnavailableError(
                f"the {self.endpoint.describe()} failed {record.attempts - attempts_before} times in "
                f"{sum(record.waits):.1f}s of backoff (retries: {dict(record.retries)}); last error: {exc}. "
                "Is the judge up and within its rate limits? Raise max_attempts / backoff_max_sec or lower "
                "max_concurrency"
            ) from exc
        except KeyRejectedError as exc:  # stopped by max_total_sec right after a rejection
            raise JudgeAuthError(f"the {self.endpoint.describe()} rejected the API key: {exc}") from exc
        raise AssertionError("unreachable")

    async def _attempt(self, request: ChatRequest, policy: RetryPolicy, record: CallRecord) -> ChatReply:
        index, key = self.keys.take()
        label = KeyPool.label(index)
        queued = time.monotonic()
        async with self.semaphore:
            record.queued_s += time.monotonic() - queued
            record.attempts += 1
            record.keys.append(label)
            self.stats.attempts += 1
            self.stats.key_uses[label] = self.stats.key_uses.get(label, 0) + 1
            self._in_flight += 1
            self.stats.max_in_flight = max(self.stats.max_in_flight, self._in_flight)
            try:
                return await self.transport.complete(request, api_key=key, timeout=policy.request_timeout_sec)
            except RetryableJudgeError as exc:
                self._count(record, exc.reason)
                raise
            except KeyRejectedError as exc:
                self._count(record, "auth")
                if index < 0:
                    raise JudgeAuthError(
                        f"the {self.endpoint.describe()} wants an API key ({exc}); set api_keys or api_key_env"
                    ) from exc
                self.keys.disable(index, f"HTTP {exc.status}")
                raise
            finally:
                self._in_flight -= 1

    def _count(self, record: CallRecord, reason: str) -> None:
        record.retries[reason] = record.retries.get(reason, 0) + 1
        self.stats.retries[reason] = self.stats.retries.get(reason, 0) + 1


_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[JudgeEndpoint, JudgeClient]] = (
    weakref.WeakKeyDictionary()
)


def shared_client(endpoint: JudgeEndpoint) -> JudgeClient:
    """The client for ``endpoint`` in the running event loop, made on first use.

    Every trial of the process that judges against the same endpoint (same
    transport, URL, keys and concurrency limit) shares its semaphore, key
    rotation, connections and stats.
    """
    loop = asyncio.get_running_loop()
    clients = _CLIENTS.setdefault(loop, {})
    client = clients.get(endpoint)
    if client is None:
        if endpoint.transport == "openai":
            assert endpoint.base_url is not None
            transport: JudgeTransport = OpenAICompatibleTransport(endpoint.base_url,
                                                                  max_connections=endpoint.max_concurrency)
        else:
            transport = LitellmTransport(endpoint.base_url)
        client = clients[endpoint] = JudgeClient(endpoint, transport)
    return client


def shared_clients() -> list[JudgeClient]:
    """The clients made in the running event loop (for stats)."""
    return list(_CLIENTS.get(asyncio.get_running_loop(), {}).values())


async def close_shared_clients() -> None:
    """Close and forget the running loop's clients (their connections). The next verdict makes new ones."""
    clients = _CLIENTS.pop(asyncio.get_running_loop(), {})
    await asyncio.gather(*(c.transport.aclose() for c in clients.values()), return_exceptions=True)


__all__ = ["CallRecord", "JudgeClient", "JudgeEndpoint", "JudgeStats", "RetryPolicy", "shared_client"]
