"""Every SDK call under a timeout; transient failures retried with backoff (tenacity)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tackroom import SandboxError, SandboxTimeoutError
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

T = TypeVar("T")


def transient_errors() -> tuple[type[BaseException], ...]:
    """Daytona errors worth another attempt: the connection, a gateway or the service failed, not the request."""
    import daytona

    return (
        daytona.DaytonaConnectionError,
        daytona.DaytonaConnectionTimeoutError,
        daytona.DaytonaBadGatewayError,
        daytona.DaytonaServiceUnavailableError,
        daytona.DaytonaInternalServerError,
        daytona.DaytonaRateLimitError,
        ConnectionError,
    )


async def bounded(what: str, make: Callable[[], Awaitable[T]], timeout: float) -> T:
    """Await ``make()`` for at most ``timeout`` seconds; a hang becomes :class:`SandboxTimeoutError`."""
    try:
        return await asyncio.wait_for(make(), timeout)
    except TimeoutError as exc:
        if isinstance(exc, SandboxTimeoutError):
            raise
        raise SandboxTimeoutError(f"daytona: {what} did not answer within {timeout:g}s") from exc


async def retried(what: str, make: Callable[[], Awaitable[T]], *, timeout: float, attempts: int, wait: float) -> T:
    """:func:`bounded` plus up to ``attempts`` tries on transient errors; the last error is re-raised."""
    transient = transient_errors()
    async for attempt in AsyncRetrying(
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=wait, max=30),
        retry=retry_if_exception(lambda e: isinstance(e, transient)),
        reraise=True,
    ):
        with attempt:
            return await bounded(what, make, timeout)
    raise SandboxError(f"daytona: {what} was not attempted")  # unreachable: AsyncRetrying runs at least once
