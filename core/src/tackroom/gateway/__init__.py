"""The policy gateway: OpenAI-compatible chat completions in front of an engine, token-in-token-out.

See ``README.md`` beside this file for the HTTP routes and the programmatic API.
"""

from tackroom.gateway.chat_template import ChatTemplate, ChatTemplateError
from tackroom.gateway.engine_client import EngineClient, EngineSettings, EngineTimeouts
from tackroom.gateway.errors import (
    AdminAuthError,
    BadRequestError,
    ContextLengthExceededError,
    EngineBadResponseError,
    EngineRateLimitedError,
    EngineRequestError,
    EngineRequestInterruptedError,
    EngineTimeoutError,
    EngineUnavailableError,
    GatewayError,
    GatewayInternalError,
    SessionNotFoundError,
)
from tackroom.gateway.server import GatewaySettings, PolicyGateway, build_gateway
from tackroom.gateway.tito import TitoSession
from tackroom.gateway.tool_parsers import ParsedOutput, ToolCall, get_tool_parser

__all__ = [
    "AdminAuthError",
    "BadRequestError",
    "ChatTemplate",
    "ChatTemplateError",
    "ContextLengthExceededError",
    "EngineBadResponseError",
    "EngineClient",
    "EngineRateLimitedError",
    "EngineRequestError",
    "EngineRequestInterruptedError",
    "EngineSettings",
    "EngineTimeoutError",
    "EngineTimeouts",
    "EngineUnavailableError",
    "GatewayError",
    "GatewayInternalError",
    "GatewaySettings",
    "ParsedOutput",
    "PolicyGateway",
    "SessionNotFoundError",
    "TitoSession",
    "ToolCall",
    "build_gateway",
    "get_tool_parser",
]
