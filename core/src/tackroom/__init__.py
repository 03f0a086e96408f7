"""tackroom: a plugin framework for agentic RL.

This module is the plugin author's API: the plugin kinds and what they exchange, how a plugin registers, the
errors that say who is to blame, and the helpers a plugin calls. The other public modules: ``tackroom.testing``
(the conformance kits, for a plugin's tests), ``tackroom.executors`` (executor authors), ``tackroom.services``
(a service's error text, secrets kept off disk) and ``tackroom.grading`` (the grader's environment, for sandboxes); drivers that run
trials use ``tackroom_app`` (the tackroom-app distribution, which also has the ``tackroom`` command). Everything
else is private (``tackroom._…``). ``__all__`` below is grouped by what a name is for; tests/test_public_api.py
holds it to a declared list.
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from tackroom._cache import cache_root
from tackroom._capability import Capability
from tackroom._errors import (
    ConfigError,
    ErrorClass,
    InfraError,
    ModelError,
    PluginDefinitionError,
    SandboxBuildError,
    SandboxTimeoutError,
    TackroomError,
    TaskError,
)
from tackroom._harness import Harness
from tackroom._lazy_exports import LazyExports
from tackroom._loss import AGGREGATIONS, Aggregation, LossSpec
from tackroom._markers import hookimpl
from tackroom._plugin import Plugin, PluginOptions, PluginSpec
from tackroom._policy import Policy
from tackroom._policy_session import PolicySession
from tackroom._registrar import Registrar
from tackroom._reward import Reward
from tackroom._sandbox import (
    DEFAULT_EXEC_TIMEOUT,
    ExecResult,
    GraderBrokenError,
    GradingSabotagedError,
    NetworkMode,
    NetworkPolicy,
    Sandbox,
    SandboxError,
    SandboxExhaustedError,
    SandboxPathError,
    SandboxProvider,
    SandboxSpec,
    check_relative_inside,
)
from tackroom._task import Task, load_task
from tackroom._trajectory import TokenTurn, Trajectory
from tackroom._trial import Trial, TrialResult
from tackroom._verifier import Verifier

try:
    __version__ = _version("tackroom")
except _PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0+unknown"

__all__ = [
    # The plugin kinds: a class with a name, Options and capabilities, or a spec declaring one by reference
    "Plugin",
    "PluginOptions",
    "PluginSpec",
    "Capability",
    "Harness",
    "SandboxProvider",
    "Verifier",
    "LossSpec",
    "Aggregation",
    "AGGREGATIONS",
    # Registration: the hook marker and what registration hooks receive
    "hookimpl",
    "Registrar",
    # What plugins exchange
    "Task",
    "Policy",
    "PolicySession",
    "Sandbox",
    "SandboxSpec",
    "NetworkPolicy",
    "NetworkMode",
    "ExecResult",
    "DEFAULT_EXEC_TIMEOUT",
    "Trajectory",
    "TokenTurn",
    "Reward",
    "Trial",
    "TrialResult",
    # Errors: who is to blame (infra, model, task), and plugin or config mistakes
    "ErrorClass",
    "TackroomError",
    "ConfigError",
    "PluginDefinitionError",
    "InfraError",
    "ModelError",
    "TaskError",
    "SandboxError",
    "SandboxBuildError",
    "SandboxTimeoutError",
    "SandboxPathError",
    "SandboxExhaustedError",
    "GradingSabotagedError",
    "GraderBrokenError",
    # Helpers a plugin calls: sandbox paths, the cache, a task (services' errors and secrets: tackroom.services)
    "check_relative_inside",
    "cache_root",
    "load_task",
    "LazyExports",
    "__version__",
]
