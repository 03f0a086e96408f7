"""tackroom: a plugin framework for agentic RL.

The public API lives here; plugins import only from ``tackroom`` (and
``tackroom.testing`` in their tests).
"""

from importlib.metadata import PackageNotFoundError, version

from tackroom._cache import cache_root
from tackroom._config import PluginSelection, RunConfig, instantiate, load_run_config
from tackroom._errors import (
    ConfigError,
    ErrorClass,
    InfraError,
    ModelError,
    PluginConflictError,
    PluginDefinitionError,
    PluginNotFoundError,
    TackroomError,
    TaskError,
)
from tackroom._harness import Harness
from tackroom._host_forward import HostPortForward, forward_into_namespace
from tackroom._loss import AGGREGATIONS, Aggregation, LossSpec
from tackroom._manager import PluginManager, get_plugin_manager, reset_plugin_manager
from tackroom._markers import hookimpl, hookspec
from tackroom._openai_errors import error_message as openai_error_message
from tackroom._plugin import PLUGIN_KINDS, Plugin, PluginKind, PluginOptions
from tackroom._policy import Policy, redact, redact_url, register_secret, register_url_secrets
from tackroom._process import ProcessOutput, run_process
from tackroom._registrar import PluginEntry, Registrar, import_ref
from tackroom._remote_calls import bounded as bounded_call
from tackroom._remote_calls import retried as retried_call
from tackroom._reward import Reward
from tackroom._run_dirs import claim_run_dir
from tackroom._sandbox import (
    DEFAULT_EXEC_TIMEOUT,
    ExecResult,
    GraderBrokenError,
    GradingSabotagedError,
    Sandbox,
    SandboxBuildError,
    SandboxError,
    SandboxPathError,
    SandboxProvider,
    SandboxSpec,
    SandboxTimeoutError,
    check_relative_inside,
)
from tackroom._tar_transfer import (
    CHECK_TRANSFER_PATH,
    TarTransfer,
    extract_tar,
    transfer_check_error,
    transfer_check_stdin,
    upload_directories,
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
    "import_ref",
    "bounded_call",
    "retried_call",
    "DEFAULT_EXEC_TIMEOUT",
    "ProcessOutput",
    "TarTransfer",
    "Trial",
    "TrialResult",
    "check_relative_inside",
    "openai_error_message",
    "run_process",
    "claim_run_dir",
    "extract_tar",
    "transfer_check_error",
    "transfer_check_stdin",
    "upload_directories",
    "CHECK_TRANSFER_PATH",
    "forward_into_namespace",
    "redact",
    "redact_url",
    "register_secret",
    "register_url_secrets",
    "cache_root",
    "AGGREGATIONS",
    "PLUGIN_KINDS",
    "Aggregation",
    "ConfigError",
    "Dataset",
    "ErrorClass",
    "ExecResult",
    "GraderBrokenError",
    "GradingSabotagedError",
    "Harness",
    "HostPortForward",
    "InfraError",
    "LossSpec",
    "ModelError",
    "Plugin",
    "PluginConflictError",
    "PluginDefinitionError",
    "PluginEntry",
    "PluginKind",
    "PluginManager",
    "PluginNotFoundError",
    "PluginOptions",
    "PluginSelection",
    "Policy",
    "Registrar",
    "Reward",
    "RunConfig",
    "Sandbox",
    "SandboxBuildError",
    "SandboxError",
    "SandboxPathError",
    "SandboxProvider",
    "SandboxSpec",
    "SandboxTimeoutError",
    "TackroomError",
    "Task",
    "TaskConfig",
    "TaskError",
    "TokenTurn",
    "Trajectory",
    "Verifier",
    "__version__",
    "get_plugin_manager",
    "hookimpl",
    "hookspec",
    "instantiate",
    "load_dataset",
    "load_run_config",
    "load_task",
    "reset_plugin_manager",
]
