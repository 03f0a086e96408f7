"""Calls to a remote service's SDK (a sandbox provider's, say) that never hang: a timeout on each call,
transient failures retried with exponential backoff (tenacity), the last error re-raised.

Plugins name what is transient for their SDK; the timeout and the retry policy are the same everywhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from tackroom import SandboxError, SandboxTimeoutError

T = TypeVar("T")


async def bounded(what: str, make: Callable[[], Awaitable[T]], timeout: float) -> T:
    """Await ``make()`` for at most ``timeout`` seconds; a hang becomes :class:`SandboxTimeoutError` naming ``what``."""
    try:
        return await asyncio.wait_for(make(), timeout)
    except TimeoutError as exc:
        if isinstance(exc, SandboxTimeoutError):
            raise
        raise SandboxTimeoutError(f"{what} did not answer within {timeout:g}s") from exc


async def retried(what: str, make: Callable[[], Awaitable[T]], *, timeout: float, attempts: int, wait: float,
                  transient: tuple[type[BaseException], ...]) -> T:
    """:func:`bounded` plus up to ``attempts`` tries while ``make()`` raises one of ``transient`` (a fresh
    coroutine each try); backoff ``wait`` · 2^n seconds, at most 30; the last error is re-raised."""
    async for attempt in AsyncRetrying(
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=wait, max=30),
        retry=retry_if_exception(lambda e: isinstance(e, transient)),
        reraise=True,
    ):
        with attempt:
            return await bounded(what, make, timeout)
    raise SandboxError(f"{what} was not attempted")  # unreachable: AsyncRetrying runs at least once
