"""Errors a user can hit. Each carries the fix in its message."""

from __future__ import annotations

from typing import Literal

ErrorClass = Literal["infra", "model", "task"]
"""How a failure counts.

``infra``  the machinery failed (sandbox died, transfer failed): retry the trial.
``model``  the policy's own failure (agent timeout, context exceeded): the trial counts, reward 0.
``task``   the task is broken (missing test script, unparsable reward): not retried, not trained on.
"""


class TackroomError(Exception):
    """Base class of every error tackroom raises on purpose."""

    error_class: ErrorClass | None = None


class ConfigError(TackroomError, ValueError):
    """A config file or value is wrong; the message names the dotted path."""


class PluginNotFoundError(ConfigError, LookupError):
    """A config selects a plugin name that is not installed."""


class PluginConflictError(TackroomError):
    """Two distributions register a plugin of the same kind under one name."""


class PluginDefinitionError(TackroomError, TypeError):
    """A plugin class breaks the plugin rules (name, Options, capabilities)."""


class PluginIncompatibleError(PluginDefinitionError):
    """A plugin was written for another plugin contract; the message names the plugin, the method and the change."""


class InfraError(TackroomError):
    """The machinery failed (sandbox, transfer, engine down); the trial is retried."""

    error_class: ErrorClass = "infra"


class ModelError(TackroomError):
    """The policy failed on its own (timeout, context exceeded); counts as reward 0."""

    error_class: ErrorClass = "model"


class TaskError(TackroomError):
    """The task itself is broken (bad files, no reward written); never retried."""

    error_class: ErrorClass = "task"


class SandboxError(InfraError):
    """The sandbox failed (died, could not start, a transfer broke)."""


class SandboxBuildError(SandboxError):
    """The environment could not be built; a ``task`` error when the Dockerfile itself is broken."""

    def __init__(self, message: str, *, task_fault: bool = False) -> None:
        super().__init__(message)
        if task_fault:
            self.error_class = "task"


class SandboxTimeoutError(SandboxError, TimeoutError):
    """A command or transfer ran past its timeout and was killed."""


class SandboxPathError(SandboxError, PermissionError):
    """A path escapes the sandbox (``..``, an absolute path outside it, a link escape)."""

    error_class = "task"


class ExecutorNotFoundError(ConfigError):
    """``runtime.executor`` names an executor no installed plugin registers."""


class ExecutorUnavailableError(ConfigError):
    """The selected executor's dependency is missing, or its cluster cannot be reached."""
