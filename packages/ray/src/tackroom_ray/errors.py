"""Errors of the ray executor: shipping a trial to a worker, losing a worker, a worker past its deadline."""

from __future__ import annotations

from tackroom import ConfigError, InfraError


class PluginNotShippableError(ConfigError):
    """A plugin class cannot be re-imported in a worker process (defined in ``__main__`` or in a function)."""


class WorkerLostError(InfraError):
    """The worker process running an attempt died (killed, out of memory, its node lost); the attempt is retried."""


class AttemptDeadlineError(InfraError):
    """An attempt outlived the sum of its own phase timeouts plus grace, so its worker was cancelled."""
