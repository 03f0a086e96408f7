"""Errors the archipelago harness raises, each classified for the trial runtime."""

from __future__ import annotations

from tackroom import InfraError, ModelError, TaskError


class WorldFormatError(TaskError):
    """A world's ``world.toml`` is missing or invalid; the message names the file and the field."""


class WorldRuntimeError(TaskError):
    """The sandbox cannot run the world's servers (no python3, too old) or the world's gateway crashed on start."""


class WorldBuildError(InfraError):
    """The world's Python packages could not be prepared on the host (``uv`` missing, index unreachable)."""


class McpGatewayError(InfraError):
    """The world's MCP endpoint stopped answering and one reconnect did not bring it back."""


class WorldLostError(ModelError):
    """The world's MCP gateway died during the model's tool call and did not come back. Counted as the model's
    (reward 0, not retried): a tool call can end the world's servers (code execution, a kill, a memory blow-up), and
    as ``infra`` a failing episode would be retried and then dropped from training, a way out of its 0."""


class ContextExhaustedError(ModelError):
    """The episode ran into the engine's context window (a turn ended with finish_reason=length at the limit)."""


class MercorImportError(TaskError):
    """A Mercor task folder cannot be imported (a file missing or malformed, a server the checkout lacks)."""
