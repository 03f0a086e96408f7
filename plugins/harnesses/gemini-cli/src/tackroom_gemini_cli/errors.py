"""Errors of the gemini-cli harness; each says what to do about it."""

from __future__ import annotations

from tackroom_agent_kit import AgentCrashError, AgentModelError, AgentTimeoutError


class GeminiCliCrashError(AgentCrashError):
    """The Gemini CLI could not start, crashed before the model acted, or stopped making progress: retried."""


class GeminiCliModelError(AgentModelError):
    """The policy's own failure seen through the Gemini CLI (a crash or hang after the model acted, a refused turn)."""


class GeminiCliTimeoutError(AgentTimeoutError):
    """The agent timeout came while the Gemini CLI was still working; it was stopped and its work is graded."""
