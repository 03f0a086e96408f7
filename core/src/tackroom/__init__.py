"""tackroom: a plugin framework for agentic RL.

The plugin API lives here; plugins import only from ``tackroom`` (and
``tackroom.testing`` in their tests). The other public modules:
``tackroom.testing`` (the conformance kits, the contract's executable spec),
``tackroom.executors`` (for executor authors) and ``tackroom.app`` (for
applications that run trials: the matrix, the trainers, your own driver).
Everything else is private (``tackroom._…``). ``__all__`` below is grouped by
what a name is for. What sandbox implementations share (safe transfers, port
forwards, bounded subprocesses, remote-SDK calls) is the tackroom-sandbox-kit
distribution (``tackroom_sandbox_kit``), not core.
"""

from importlib.metadata import PackageNotFoundError, version

from tackroom._cache import cache_root
from tackroom._config import PluginSelection, RunConfig
from tackroom._contract import CONTRACT_VERSION
from tackroom._errors import (
    ConfigError,
    ErrorClass,
    InfraError,
    ModelError,
    PluginConflictError,
    PluginDefinitionError,
    PluginIncompatibleError,
    PluginNotFoundError,
    TackroomError,
    TaskError,
)
from tackroom._harness import Harness
from tackroom._import_ref import import_ref
from tackroom._loss import AGGREGATIONS, Aggregation, LossSpec
from tackroom._manager import PluginManager, get_plugin_manager, reset_plugin_manager
from tackroom._markers import hookimpl, hookspec
from tackroom._openai_errors import error_message as openai_error_message
from tackroom._plugin import PLUGIN_KINDS, Plugin, PluginKind, PluginOptions
from tackroom._policy import Policy, redact, redact_url, register_secret, register_url_secrets
from tackroom._registrar import PluginEntry, Registrar
from tackroom._resolve import instantiate, load_run_config
from tackroom._reward import Reward
from tackroom._run_dirs import claim_run_dir
from tackroom._sandbox import (
    DEFAULT_EXEC_TIMEOUT,
    GRADER_CLEAN_ENV,
    GRADER_SCRUBBED_ENV,
    ExecResult,
    GraderBrokenError,
    GradingSabotagedError,
    NetworkMode,
    NetworkPolicy,
    Sandbox,
    SandboxBuildError,
    SandboxError,
    SandboxExhaustedError,
    SandboxPathError,
    SandboxProvider,
    SandboxSpec,
    SandboxTimeoutError,
    check_relative_inside,
)
from tackroom._task import Dataset, Task, TaskConfig, load_dataset, load_task
from tackroom._trajectory import TokenTurn, Trajectory
from tackroom._trial import Trial, TrialResult
from tackroom._verifier import Verifier

try:
    __version__ = version("tackroom")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0+unknown"

__all__ = [
    # The contract: the four plugin kinds and what they exchange
    "CONTRACT_VERSION",
    "PLUGIN_KINDS",
    "PluginKind",
    "Plugin",
    "PluginOptions",
    "Harness",
    "SandboxProvider",
    "Sandbox",
    "SandboxSpec",
    "NetworkPolicy",
    "NetworkMode",
    "ExecResult",
    "DEFAULT_EXEC_TIMEOUT",
    "GRADER_SCRUBBED_ENV",
    "GRADER_CLEAN_ENV",
    "Verifier",
    "LossSpec",
    "Aggregation",
    "AGGREGATIONS",
    "Task",
    "TaskConfig",
    "Dataset",
    "Trajectory",
    "TokenTurn",
    "Reward",
    "Policy",
    "Trial",
    "TrialResult",
    # Registration: hooks, the registrar, the manager
    "hookimpl",
    "hookspec",
    "Registrar",
    "PluginEntry",
    "PluginManager",
    "get_plugin_manager",
    "reset_plugin_manager",
    "import_ref",
    # Configs: selecting plugins by name
    "RunConfig",
    "PluginSelection",
    "load_run_config",
    "instantiate",
    # Errors: who is to blame (infra, model, task) and config mistakes
    "ErrorClass",
    "TackroomError",
    "ConfigError",
    "PluginNotFoundError",
    "PluginConflictError",
    "PluginDefinitionError",
    "PluginIncompatibleError",
    "InfraError",
    "ModelError",
    "TaskError",
    "GradingSabotagedError",
    "GraderBrokenError",
    "SandboxError",
    "SandboxBuildError",
    "SandboxTimeoutError",
    "SandboxPathError",
    "SandboxExhaustedError",
    # For sandbox providers: a path check (the rest of their helpers is tackroom-sandbox-kit's)
    "check_relative_inside",
    # Helpers for calling services: error text, secrets kept off disk
    "openai_error_message",
    "redact",
    "redact_url",
    "register_secret",
    "register_url_secrets",
    # Tasks from disk, the cache, run folders, the version
    "cache_root",
    "claim_run_dir",
    "load_dataset",
    "load_task",
    "__version__",
]
