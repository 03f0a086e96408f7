"""Errors of the executor layer: selecting one, shipping a trial to it, losing a worker."""

from __future__ import annotations

from tackroom.errors import ConfigError, InfraError


class ExecutorNotFoundError(ConfigError):
    """``runtime.executor`` names an executor that does not exist."""


class ExecutorUnavailableError(ConfigError):
    """The selected executor's optional dependency is missing, or its cluster cannot be reached."""


class PluginNotShippableError(ConfigError):
    """A plugin class cannot be re-imported in a worker process (defined in ``__main__`` or in a function)."""


class WorkerLostError(InfraError):
    """The worker process running an attempt died (killed, out of memory, its node lost); the attempt is retried."""


class AttemptDeadlineError(InfraError):
    """An attempt outlived the sum of its own phase timeouts plus grace, so its worker was cancelled."""
