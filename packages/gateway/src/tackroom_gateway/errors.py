"""Engine failures, classified for the trial and shaped as OpenAI errors for the client.

Every error the gateway answers is ``{"error": {"message", "type", "param", "code"}}``
with the status below; the class (``infra`` / ``model`` / none) is what the trial's
session records (``PolicyGateway.session_error``).
"""

from __future__ import annotations

from typing import Any

from tackroom import InfraError, ModelError, TackroomError


class GatewayError(TackroomError):
    """Base of the gateway's own errors; knows its HTTP status and OpenAI error type/code."""

    status_code = 500
    error_type = "server_error"
    code: str | None = None
    retry_after: float | None = None
    """Seconds a client should wait before trying again (sent as ``Retry-After``), when known."""

    def openai(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": self.error_type, "param": None, "code": self.code}}

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(max(1, round(self.retry_after)))} if self.retry_after is not None else {}


class ContextLengthExceededError(GatewayError, ModelError):
    """The prompt plus requested completion does not fit the engine's context: the policy's own failure."""

    status_code = 400
    error_type = "invalid_request_error"
    code = "context_length_exceeded"


class EngineRequestError(GatewayError, ModelError):
    """The engine rejected the request's content (HTTP 400/413/422, not context length); retrying will not help."""

    status_code = 400
    error_type = "invalid_request_error"
    code = "engine_rejected_request"


class EngineUnavailableError(GatewayError, InfraError):
    """The engine could not be reached, died mid-request, refused the gateway (401/403/404) or kept answering
    5xx after retries: retry the trial."""

    status_code = 503
    error_type = "engine_unavailable"
    code = "engine_unavailable"

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class EngineRateLimitedError(EngineUnavailableError):
    """The engine (or a proxy in front of it) kept answering 429 past the retry budget: retry the trial."""

    status_code = 429
    error_type = "rate_limit_error"
    code = "engine_rate_limited"


class EngineBadResponseError(EngineUnavailableError):
    """The engine answered 200 with something that is not a completion (not JSON, truncated, no token ids)."""

    status_code = 502
    error_type = "engine_bad_response"
    code = "engine_bad_response"


class EngineTimeoutError(GatewayError, InfraError):
    """The engine did not answer within the gateway's timeout: retry the trial (or raise the timeout)."""

    status_code = 504
    error_type = "engine_timeout"
    code = "engine_timeout"


class EngineRequestInterruptedError(GatewayError, InfraError):
    """An engine request was cut off from outside: the client went away (the agent's turn ended), the
    session was closed or the gateway stopped while the engine was still working on it."""

    status_code = 503
    error_type = "engine_unavailable"
    code = "engine_request_interrupted"


class WorkerLostError(GatewayError, InfraError):
    """A multi-worker gateway (``tackroom gateway --workers N``): the worker process that held this session exited,
    and the session's turns went with it. Open a new session; retry the trial."""

    status_code = 503
    error_type = "server_error"
    code = "gateway_worker_lost"


class GatewayInternalError(GatewayError, InfraError):
    """A bug in the gateway itself; the message names the exception, the log has the details."""

    status_code = 500
    error_type = "server_error"
    code = "internal_error"


class BadRequestError(GatewayError):
    """The client's request is malformed or asks for something the gateway does not support."""

    status_code = 400
    error_type = "invalid_request_error"
    code = "invalid_request"


class SessionNotFoundError(GatewayError, LookupError):
    """No session with this id (or this token) exists, or it was closed."""

    status_code = 404
    error_type = "not_found_error"
    code = "session_not_found"


class AdminAuthError(GatewayError):
    """A route that needs the gateway's admin token was called without it (``Authorization: Bearer <token>``)."""

    status_code = 401
    error_type = "authentication_error"
    code = "invalid_admin_token"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": 'Bearer realm="tackroom-gateway-admin"'}


_CONTEXT_MARKERS = (
    "maximum context length",
    "context length",
    "max_model_len",
    "prompt is too long",
    "too many tokens",
    "longer than the maximum model length",
)

_CONTENT_REJECTIONS = (400, 413, 422)
"""Statuses that say the request's content is wrong; any other 4xx is about the gateway or the engine."""


def classify_engine_rejection(status: int, message: str) -> GatewayError:
    """A 4xx answer from the engine (not 408/429, which are retried) as a typed error.

    400/413/422 reject what the request asks for (context length, bad sampling
    parameters): the policy's side. Anything else (401/403 a wrong API key,
    404 a wrong URL or model name, 405, 409, ...) is the gateway's setup: infra.
    """
    low = message.lower()
    if status in _CONTENT_REJECTIONS and any(m in low for m in _CONTEXT_MARKERS):
        return ContextLengthExceededError(f"engine: {message}")
    if status in _CONTENT_REJECTIONS:
        return EngineRequestError(f"engine rejected the request (HTTP {status}): {message}")
    return EngineUnavailableError(
        f"engine refused the gateway (HTTP {status}): {message}; check the engine URL, model name and API key"
    )
