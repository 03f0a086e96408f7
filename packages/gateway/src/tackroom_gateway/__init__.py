"""tackroom-gateway: the policy gateway — OpenAI-compatible chat completions in front of an engine,
token-in-token-out — with the tokenizers and chat templates it renders with, and ``tackroom gateway``.

Registered through the ``tackroom`` entry-point group like any plugin: it adds the
``gateway`` command (``tackroom_commands``) and starts the gateway that chat-only
harnesses are routed through (``tackroom_policy_gateway``, asked by
:func:`tackroom_app.policy_routing`). Importing this module is cheap: the names below load
their module (starlette, uvicorn, transformers) on first use. Plugins import them from
here, never from the sub-modules. See ``README.md`` in the package for the HTTP routes
and the programmatic API.
"""

from __future__ import annotations

from typing import Any

import tackroom

tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@tackroom.hookimpl
def tackroom_commands(app: Any) -> None:
    from tackroom_gateway.cli import add_gateway_command

    add_gateway_command(app)


@tackroom.hookimpl
def tackroom_policy_gateway(base_url: str, model: str | None, api_key: str, tokenizer: str) -> Any:
    """A :class:`PolicyGateway` (not started) in front of the engine at ``base_url``; ``async with`` serves it."""
    from tackroom_gateway.backend import GatewaySettings
    from tackroom_gateway.engine_client import EngineSettings
    from tackroom_gateway.server import PolicyGateway

    engine = EngineSettings(base_url=base_url, model=model, api_key=api_key)
    return PolicyGateway(GatewaySettings(engine=engine, tokenizer=tokenizer))


_EXPORTS = tackroom.LazyExports(__name__, {
    "tackroom_gateway.asgi_server": ["InLoopServer"],
    "tackroom_gateway.chat_template": ["ChatTemplate", "ChatTemplateError", "image_placeholder"],
    "tackroom_gateway.engine_client": ["PROBE_USER", "EngineClient", "EngineSettings", "EngineTimeouts"],
    "tackroom_gateway.errors": [
        "AdminAuthError", "BadRequestError", "ContextLengthExceededError", "EngineBadResponseError",
        "EngineRateLimitedError", "EngineRequestError", "EngineRequestInterruptedError", "EngineTimeoutError",
        "EngineUnavailableError", "GatewayError", "GatewayInternalError", "SessionNotFoundError", "WorkerLostError",
        "classify_engine_rejection"],
    "tackroom_gateway.protocol": ["forced_tool_call_tag"],
    "tackroom_gateway.template_files": ["TEMPLATES_DIR"],
    "tackroom_gateway.backend": ["GatewaySettings"],
    "tackroom_gateway.server": ["PolicyGateway", "build_gateway"],
    "tackroom_gateway.tito": ["TitoSession"],
    "tackroom_gateway.tokenizers": [
        "KNOWN_TOKENIZERS", "TokenizerFetchError", "TokenizerProvenance", "load_tokenizer", "qwen3_tokenizer_dir",
        "smollm2_gguf", "smollm2_tokenizer_dir", "tokenizer_dir", "tokenizers_dir"],
    "tackroom_gateway.tool_parsers": ["ParsedOutput", "ToolCall", "ToolParser", "get_tool_parser"],
    "tackroom_gateway.trial_sessions": ["GatewaySessions", "GatewayTrialSession"],
    "tackroom_gateway.weight_updates": ["WeightGate", "WeightUpdateMode", "WeightUpdateState"],
    "tackroom_gateway.workers": ["GatewayWorkers", "WorkersSettings"],
})
__getattr__, __dir__, __all__ = _EXPORTS.getattr, _EXPORTS.dir, _EXPORTS.names
