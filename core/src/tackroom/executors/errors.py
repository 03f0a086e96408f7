"""Errors of choosing an executor; an executor package adds its own (``tackroom-ray``: a lost worker, …)."""

from __future__ import annotations

from tackroom._errors import ConfigError


class ExecutorNotFoundError(ConfigError):
    """``runtime.executor`` names an executor no installed plugin registers."""


class ExecutorUnavailableError(ConfigError):
    """The selected executor's dependency is missing, or its cluster cannot be reached."""
