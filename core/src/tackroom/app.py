"""The API for applications built on the trial runtime: the matrix, the trainers, your own driver.

Plugin authors need only :mod:`tackroom` (and :mod:`tackroom.testing` in their
tests); executor authors :mod:`tackroom.executors`. An application that runs
trials itself (builds a :class:`TrialRuntime`, claims run folders, routes a
policy through the gateway, reads run configs) imports from here. Everything
else under ``tackroom.`` is private: ``tests/test_public_api.py`` fails when a
plugin or package imports it.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from tackroom._attempt import sandbox_spec
from tackroom._config import (
    FieldError,
    NetworkDefaults,
    RuntimeConfig,
    TaskSelection,
    check_run_id,
    dotted,
    format_validation_error,
    read_toml,
    validate,
    with_overrides,
)
from tackroom._endpoint import Endpoint
from tackroom._manager import PluginManager, get_plugin_manager
from tackroom._plugin import check_plugin_class
from tackroom._policy import register_secrets_in
from tackroom._policy_routing import gateway_sessions, policy_gateway, policy_routing, wants_gateway
from tackroom._registrar import BASES
from tackroom._resolve import ExecutorName, resolve_run_config, resolve_runtime
from tackroom._run import run_config
from tackroom._run_dirs import (
    claim_run_dir,
    has_results,
    new_run_id,
    task_changes,
    tasks_fingerprint,
    unique_trials,
    validated_run_id,
)
from tackroom._runtime import TrialOutcome, TrialPlugins, TrialRuntime
from tackroom._task import TaskLoadFailure
from tackroom._trial import Trial, TrialErrorInfo, TrialResult, slug

if TYPE_CHECKING:
    from rich.console import Console

T = TypeVar("T")

TERMINATED_EXIT_CODE = 143
"""What a command stopped by SIGTERM exits with (128 + 15, as a shell reports it)."""


def run_to_completion(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` where SIGTERM stops the work the way Ctrl-C does: the main task is cancelled, so
    every ``finally`` runs (sandboxes torn down, engines and Tinker servers stopped), then the process exits
    with :data:`TERMINATED_EXIT_CODE`. Plain ``asyncio.run`` dies at once on SIGTERM (a scheduler's stop, a
    ``timeout``), leaving what the run started behind."""
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        return asyncio.run(main)
    terminated = False

    async def guarded() -> T:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        assert task is not None

        def on_sigterm() -> None:
            nonlocal terminated
            terminated = True
            task.cancel()

        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
        try:
            return await main
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    try:
        result = asyncio.run(guarded())
    except asyncio.CancelledError:
        if terminated:
            raise SystemExit(TERMINATED_EXIT_CODE) from None
        raise
    if terminated:  # the work swallowed the cancellation; it was still told to stop
        raise SystemExit(TERMINATED_EXIT_CODE)
    return result


def print_error(message: object, console: Console | None = None) -> None:
    """``error: <message>`` on stderr (or ``console``), the message printed as it is: text such as
    ``[policy]`` or ``[/]`` in a config error is shown, not read as rich markup."""
    from rich.console import Console
    from rich.text import Text

    (console or Console(stderr=True)).print(Text("error: ", style="bold red") + Text(str(message)), soft_wrap=True)

__all__ = [
    "TERMINATED_EXIT_CODE",
    "run_to_completion",
    "BASES",
    "ExecutorName",
    "FieldError",
    "PluginManager",
    "Endpoint",
    "NetworkDefaults",
    "RuntimeConfig",
    "TaskSelection",
    "TaskLoadFailure",
    "Trial",
    "TrialErrorInfo",
    "TrialOutcome",
    "TrialPlugins",
    "TrialResult",
    "TrialRuntime",
    "check_plugin_class",
    "check_run_id",
    "claim_run_dir",
    "dotted",
    "format_validation_error",
    "gateway_sessions",
    "get_plugin_manager",
    "has_results",
    "new_run_id",
    "print_error",
    "policy_gateway",
    "policy_routing",
    "read_toml",
    "register_secrets_in",
    "sandbox_spec",
    "slug",
    "task_changes",
    "tasks_fingerprint",
    "unique_trials",
    "validate",
    "validated_run_id",
    "wants_gateway",
    "with_overrides",
    "resolve_run_config",
    "resolve_runtime",
    "run_config",
]
