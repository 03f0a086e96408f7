"""Every Modal SDK call under a timeout; transient failures retried with backoff (``tackroom_sandbox_kit.remote_calls``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from tackroom_sandbox_kit import bounded_call, retried_call

T = TypeVar("T")


def transient_errors() -> tuple[type[BaseException], ...]:
    """Modal errors worth another attempt: the connection or the service failed, not the request."""
    import modal.exception as me

    return (me.ConnectionError, me.InternalError, me.InternalFailure, me.ServiceError, me.ResourceExhaustedError, ConnectionError)


async def bounded(what: str, make: Callable[[], Awaitable[T]], timeout: float) -> T:
    return await bounded_call(f"modal: {what}", make, timeout)


async def retried(what: str, make: Callable[[], Awaitable[T]], *, timeout: float, attempts: int, wait: float) -> T:
    return await retried_call(f"modal: {what}", make, timeout=timeout, attempts=attempts, wait=wait,
                                      transient=transient_errors())
