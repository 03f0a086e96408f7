"""tackroom: a plugin framework for agentic RL.

The public API lives here; plugins import only from ``tackroom`` (and
``tackroom.testing`` in their tests).
"""

from importlib.metadata import PackageNotFoundError, version

from tackroom.cache import cache_root
from tackroom.config import PluginSelection, RunConfig, instantiate, load_run_config
from tackroom.errors import (
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
from tackroom.harness import Harness
from tackroom.host_forward import HostPortForward, forward_into_namespace
from tackroom.loss import AGGREGATIONS, Aggregation, LossSpec
from tackroom.manager import PluginManager, get_plugin_manager, reset_plugin_manager
from tackroom.markers import hookimpl, hookspec
from tackroom.openai_errors import error_message as openai_error_message
from tackroom.plugin import PLUGIN_KINDS, Plugin, PluginKind, PluginOptions
from tackroom.policy import Policy, redact, redact_url, register_secret, register_url_secrets
from tackroom.process import ProcessOutput, run_process
from tackroom.registrar import PluginEntry, Registrar, import_ref
from tackroom.reward import Reward
from tackroom.run_dirs import claim_run_dir
from tackroom.sandbox import (
    DEFAULT_EXEC_TIMEOUT,
    ExecResult,
    Sandbox,
    SandboxBuildError,
    SandboxError,
    SandboxPathError,
    SandboxProvider,
    SandboxSpec,
    SandboxTimeoutError,
    check_relative_inside,
)
from tackroom.tar_transfer import (
    CHECK_TRANSFER_PATH,
    TarTransfer,
    extract_tar,
    transfer_check_error,
    transfer_check_stdin,
    upload_directories,
)
from tackroom.task import Dataset, Task, TaskConfig, load_dataset, load_task
from tackroom.trajectory import TokenTurn, Trajectory
from tackroom.trial import Trial, TrialResult
from tackroom.verifier import Verifier

try:
    __version__ = version("tackroom")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0+unknown"

__all__ = [
    "import_ref",
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
