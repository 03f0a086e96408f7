"""The API dialects the gateway answers: OpenAI chat completions, OpenAI Responses, Anthropic Messages and Google
Gemini. Each translates its requests onto the chat request a session's token accounting already knows
(:class:`~tackroom_gateway.dialects.base.Dialect`), so one trial is one token session whatever its agent speaks."""

from __future__ import annotations

from tackroom_gateway.dialects.base import Dialect, DialectCall
from tackroom_gateway.dialects.chat import CHAT
from tackroom_gateway.dialects.gemini import GEMINI
from tackroom_gateway.dialects.messages import COUNT_TOKENS, MESSAGES
from tackroom_gateway.dialects.responses import RESPONSES

DIALECTS: tuple[Dialect, ...] = (CHAT, GEMINI, RESPONSES, MESSAGES, COUNT_TOKENS)
"""Every dialect the gateway serves, each on its own ``paths``."""

__all__ = ["CHAT", "COUNT_TOKENS", "DIALECTS", "GEMINI", "MESSAGES", "RESPONSES", "Dialect", "DialectCall"]
