"""Engine failures, classified for the trial and shaped as OpenAI errors for the client."""

from __future__ import annotations

from typing import Any

from tackroom.errors import InfraError, ModelError, TackroomError


class GatewayError(TackroomError):
    """Base of the gateway's own errors; knows its HTTP status and OpenAI error type/code."""

    status_code = 500
    error_type = "server_error"
    code: str | None = None

    def openai(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": self.error_type, "param": None, "code": self.code}}


class ContextLengthExceededError(GatewayError, ModelError):
    """The prompt plus requested completion does not fit the engine's context: the policy's own failure."""

    status_code = 400
    error_type = "invalid_request_error"
    code = "context_length_exceeded"


class EngineRequestError(GatewayError, ModelError):
    """The engine rejected the request (HTTP 4xx other than context length); retrying will not help."""

    status_code = 400
    error_type = "invalid_request_error"
    code = "engine_rejected_request"


class EngineUnavailableError(GatewayError, InfraError):
    """The engine could not be reached, died mid-request or kept answering 5xx after retries: retry the trial."""

    status_code = 503
    error_type = "engine_unavailable"
    code = "engine_unavailable"


class EngineTimeoutError(GatewayError, InfraError):
    """The engine did not answer within the gateway's timeout: retry the trial (or raise the timeout)."""

    status_code = 504
    error_type = "engine_timeout"
    code = "engine_timeout"


class BadRequestError(GatewayError):
    """The client's request is malformed or asks for something the gateway does not support."""

    status_code = 400
    error_type = "invalid_request_error"
    code = "invalid_request"


class SessionNotFoundError(GatewayError, LookupError):
    """No session with this id has made a request (or it was closed)."""

    status_code = 404
    error_type = "not_found_error"
    code = "session_not_found"


_CONTEXT_MARKERS = (
    "maximum context length",
    "context length",
    "max_model_len",
    "prompt is too long",
    "too many tokens",
    "longer than the maximum model length",
)


def classify_engine_rejection(status: int, message: str) -> GatewayError:
    """A 4xx answer from the engine as a typed error."""
    low = message.lower()
    if status in (400, 413, 422) and any(m in low for m in _CONTEXT_MARKERS):
        return ContextLengthExceededError(f"engine: {message}")
    return EngineRequestError(f"engine rejected the request (HTTP {status}): {message}")
