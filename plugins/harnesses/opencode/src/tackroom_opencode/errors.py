"""Errors of the opencode harness; each says what to do about it."""

from __future__ import annotations

from tackroom_agent_kit import (
    AgentCrashError,
    AgentModelError,
    AgentTimeoutError,
    PolicyUnreachableError,  # the sandbox cannot connect to the policy (infra)
)


class OpenCodeCrashError(AgentCrashError):
    """OpenCode exited with an error, or stopped making progress (a hang); its log is in the message."""


class OpenCodeModelError(AgentModelError):
    """The policy's own failure seen through OpenCode (context exhausted, an answer the provider rejected)."""


class OpenCodeTimeoutError(AgentTimeoutError):
    """The agent timeout came while OpenCode was still working; it was stopped and the verifier grades what it left."""


__all__ = ["OpenCodeCrashError", "OpenCodeModelError", "OpenCodeTimeoutError", "PolicyUnreachableError"]
