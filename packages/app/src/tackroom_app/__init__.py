"""tackroom-app: the ``tackroom`` command and the driver API.

For drivers: applications that run trials (the matrix, the trainers, your own driver). A driver finds plugins
by name, reads run configs, builds a :class:`TrialRuntime`, routes a policy through the gateway and keeps run
folders with what is here; the values it passes around and the errors are :mod:`tackroom`'s. This module is the
one door (everything else here is ``tackroom_app._…``); tests/test_public_api.py holds ``__all__`` to a declared
list. The plugin contract, the runtime and the executors are core's (the ``tackroom`` distribution); this
distribution builds on core's private modules, so the two are released together.
"""

from tackroom._attempt import sandbox_spec
from tackroom._config import (
    FieldError,
    NetworkDefaults,
    PluginSelection,
    RunConfig,
    RuntimeConfig,
    TaskSelection,
    format_validation_error,
    read_toml,
    validate,
    with_overrides,
)
from tackroom._endpoint import Endpoint
from tackroom._errors import PluginConflictError, PluginIncompatibleError, PluginNotFoundError
from tackroom._manager import PluginManager, get_plugin_manager, reset_plugin_manager
from tackroom._plugin import PLUGIN_KINDS, PluginKind
from tackroom._policy import register_secrets_in
from tackroom._registrar import PluginEntry
from tackroom._runtime import TrialPlugins, TrialRuntime
from tackroom._task import Dataset, TaskLoadFailure, load_dataset
from tackroom._trial import TrialErrorInfo, slug
from tackroom_app._command import (
    INTERRUPTED_EXIT_CODE,
    TERMINATED_EXIT_CODE,
    command_console,
    print_error,
    run_to_completion,
)
from tackroom_app._policy_routing import gateway_sessions, policy_gateway, policy_routing, wants_gateway
from tackroom_app._refusals import refuse_unrunnable
from tackroom_app._resolve import ExecutorName, instantiate, load_run_config, resolve_runtime
from tackroom_app._run import run_config
from tackroom_app._run_dirs import (
    claim_run_dir,
    has_results,
    task_changes,
    tasks_fingerprint,
    unique_trials,
    validated_run_id,
)

__all__ = [
    # Plugins by name: the manager, what it records, building one from a config section
    "PluginManager",
    "Endpoint",
    "NetworkDefaults",
    "PluginEntry",
    "PluginKind",
    "PLUGIN_KINDS",
    "get_plugin_manager",
    "reset_plugin_manager",
    "instantiate",
    "PluginNotFoundError",
    "PluginConflictError",
    "PluginIncompatibleError",
    # Configs: run configs, their sections, and the helpers a driver's own config is built with
    "RunConfig",
    "PluginSelection",
    "RuntimeConfig",
    "TaskSelection",
    "ExecutorName",
    "load_run_config",
    "resolve_runtime",
    "read_toml",
    "validate",
    "with_overrides",
    "format_validation_error",
    "FieldError",
    "register_secrets_in",
    # Task sets
    "load_dataset",
    "Dataset",
    "TaskLoadFailure",
    # Running trials, and reaching the policy (through the gateway for chat-only harnesses)
    "TrialRuntime",
    "TrialPlugins",
    "TrialErrorInfo",
    "run_config",
    "policy_routing",
    "policy_gateway",
    "gateway_sessions",
    "wants_gateway",
    "sandbox_spec",
    "refuse_unrunnable",
    # Run folders: claimed once, resumed only with the same tasks
    "claim_run_dir",
    "has_results",
    "task_changes",
    "tasks_fingerprint",
    "unique_trials",
    "validated_run_id",
    "slug",
    # A command's process: SIGTERM like Ctrl-C, errors printed as they are, output whole in a file or a pipe
    "run_to_completion",
    "print_error",
    "command_console",
    "TERMINATED_EXIT_CODE",
    "INTERRUPTED_EXIT_CODE",
]
