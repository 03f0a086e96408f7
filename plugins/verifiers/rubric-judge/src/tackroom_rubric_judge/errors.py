"""How a judge call fails.

Final errors are :class:`tackroom.InfraError` subclasses: a trial whose judge
could not give a verdict is retried by the runtime, never scored 0.
:class:`RetryableJudgeError` and :class:`KeyRejectedError` never leave the
client; they drive its retry loop.
"""

from __future__ import annotations

import tackroom


class JudgeError(tackroom.InfraError):
    """The judge could not give a verdict."""


class JudgeUnavailableError(JudgeError):
    """The judge kept failing with retryable errors (429, 5xx, timeouts, dropped connections) until retries ran out."""


class JudgeAuthError(JudgeError):
    """Every configured API key was rejected (401/403). Not retried: fix the keys."""


class JudgeContextTooLongError(JudgeError):
    """The prompt does not fit the judge's context even after shrinking the answer and file report."""


class JudgeBadRequestError(JudgeError):
    """The judge refused the request (400/404/422 …) for a reason retrying cannot fix (wrong model name, bad option)."""


class JudgeInvalidOutputError(JudgeError):
    """The judge's replies were not a valid verdict JSON object, also after the bounded re-asks."""


class RetryableJudgeError(Exception):
    """A transient failure: 429, 5xx, a timeout, a dropped connection, an unparseable response body."""

    def __init__(self, reason: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        """Short label counted in the stats: ``429``, ``500``, ``timeout``, ``connection``, ``malformed_body`` …"""
        self.retry_after = retry_after


class KeyRejectedError(Exception):
    """One API key was rejected (401/403); the client disables it and tries the next key at once."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
