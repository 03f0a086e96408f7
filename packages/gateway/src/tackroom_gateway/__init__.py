"""tackroom-gateway: the policy gateway — OpenAI-compatible chat completions in front of an engine,
token-in-token-out — with the tokenizers and chat templates it renders with, and ``tackroom gateway``.

Registered through the ``tackroom`` entry-point group like any plugin: it adds the
``gateway`` command (``tackroom_commands``) and starts the gateway that chat-only
harnesses are routed through (``tackroom_policy_gateway``, asked by
:func:`tackroom.app.policy_routing`). Importing this module is cheap: the names below load
their module (starlette, uvicorn, transformers) on first use. Plugins import them from
here, never from the sub-modules. See ``README.md`` in the package for the HTTP routes
and the programmatic API.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

import tackroom

if TYPE_CHECKING:
    from tackroom_gateway.asgi_server import InLoopServer
    from tackroom_gateway.chat_template import TEMPLATES_DIR, ChatTemplate, ChatTemplateError
    from tackroom_gateway.engine_client import PROBE_USER, EngineClient, EngineSettings, EngineTimeouts
    from tackroom_gateway.errors import (
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
        classify_engine_rejection,
    )
    from tackroom_gateway.protocol import forced_tool_call_tag
    from tackroom_gateway.server import GatewaySettings, PolicyGateway, build_gateway
    from tackroom_gateway.tito import TitoSession
    from tackroom_gateway.tokenizers import (
        KNOWN_TOKENIZERS,
        TokenizerFetchError,
        TokenizerProvenance,
        load_tokenizer,
        qwen3_tokenizer_dir,
        smollm2_gguf,
        smollm2_tokenizer_dir,
        tokenizer_dir,
        tokenizers_dir,
    )
    from tackroom_gateway.tool_parsers import ParsedOutput, ToolCall, ToolParser, get_tool_parser
    from tackroom_gateway.trial_sessions import GatewaySessions, GatewayTrialSession


tackroom_contract = 2
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@tackroom.hookimpl
def tackroom_commands(app: Any) -> None:
    from tackroom_gateway.cli import add_gateway_command

    add_gateway_command(app)


@tackroom.hookimpl
def tackroom_policy_gateway(base_url: str, model: str | None, api_key: str, tokenizer: str) -> Any:
    """A :class:`PolicyGateway` (not started) in front of the engine at ``base_url``; ``async with`` serves it."""
    from tackroom_gateway.engine_client import EngineSettings
    from tackroom_gateway.server import GatewaySettings, PolicyGateway

    engine = EngineSettings(base_url=base_url, model=model, api_key=api_key)
    return PolicyGateway(GatewaySettings(engine=engine, tokenizer=tokenizer))


_EXPORTS = {
    "InLoopServer": "asgi_server",
    "ChatTemplate": "chat_template", "ChatTemplateError": "chat_template", "TEMPLATES_DIR": "chat_template",
    "PROBE_USER": "engine_client", "EngineClient": "engine_client", "EngineSettings": "engine_client",
    "EngineTimeouts": "engine_client",
    **dict.fromkeys([
        "AdminAuthError", "BadRequestError", "ContextLengthExceededError", "EngineBadResponseError",
        "EngineRateLimitedError", "EngineRequestError", "EngineRequestInterruptedError", "EngineTimeoutError",
        "EngineUnavailableError", "GatewayError", "GatewayInternalError", "SessionNotFoundError",
        "classify_engine_rejection"], "errors"),
    "forced_tool_call_tag": "protocol",
    "GatewaySettings": "server", "PolicyGateway": "server", "build_gateway": "server",
    "TitoSession": "tito",
    **dict.fromkeys([
        "KNOWN_TOKENIZERS", "TokenizerFetchError", "TokenizerProvenance", "load_tokenizer",
        "qwen3_tokenizer_dir", "smollm2_gguf", "smollm2_tokenizer_dir", "tokenizer_dir", "tokenizers_dir"], "tokenizers"),
    "ParsedOutput": "tool_parsers", "ToolCall": "tool_parsers", "ToolParser": "tool_parsers",
    "get_tool_parser": "tool_parsers",
    "GatewaySessions": "trial_sessions", "GatewayTrialSession": "trial_sessions",
}

__all__ = [
    "AdminAuthError", "BadRequestError", "ChatTemplate", "ChatTemplateError", "ContextLengthExceededError",
    "EngineBadResponseError", "EngineClient", "EngineRateLimitedError", "EngineRequestError",
    "EngineRequestInterruptedError", "EngineSettings", "EngineTimeoutError", "EngineTimeouts",
    "EngineUnavailableError", "GatewayError", "GatewayInternalError", "GatewaySessions", "GatewaySettings",
    "GatewayTrialSession", "InLoopServer", "KNOWN_TOKENIZERS", "PROBE_USER", "ParsedOutput", "PolicyGateway",
    "SessionNotFoundError", "TEMPLATES_DIR", "TitoSession", "TokenizerFetchError", "TokenizerProvenance",
    "ToolCall", "ToolParser", "build_gateway", "classify_engine_rejection", "forced_tool_call_tag",
    "get_tool_parser", "load_tokenizer", "qwen3_tokenizer_dir", "smollm2_gguf", "smollm2_tokenizer_dir",
    "tokenizer_dir", "tokenizers_dir",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f"tackroom_gateway.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'tackroom_gateway' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
