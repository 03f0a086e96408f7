"""Executors by name, resolved against the plugin registry: which exist, and one built with its options (what the
runtime and ``tackroom.executors`` need; a driver's names in a run config are resolved by ``tackroom_app``).
A class registered by reference is imported when built.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from tackroom._config import format_validation_error
from tackroom._errors import ConfigError, ExecutorNotFoundError
from tackroom._executor import Executor
from tackroom._manager import PluginManager, get_plugin_manager
from tackroom._registrar import PluginEntry

INSTALL_HINTS = {"ray": "pip install tackroom-ray (or pip install ./packages/app ./packages/ray from a checkout of "
                        "the tackroom repository)"}
"""Executors this project ships outside core, and how to get them."""


def unknown_executor_message(name: str, manager: PluginManager | None = None) -> str | None:
    """``None`` when ``name`` is a registered executor, else why not: what exists, and how to install it."""
    manager = manager or get_plugin_manager()
    registered = manager.registrar.executors
    if name in registered:
        return None
    message = f"{name!r} is not an executor; available: {', '.join(sorted(registered)) or '(none)'}"
    if name in INSTALL_HINTS:
        message += f". The {name} executor is a package of its own: {INSTALL_HINTS[name]}"
    return message + manager.not_loaded()


def executor_entry(name: str, manager: PluginManager | None = None) -> PluginEntry:
    """The registered executor ``name``; :class:`ExecutorNotFoundError` listing the executors otherwise."""
    problem = unknown_executor_message(name, manager)
    if problem is not None:
        raise ExecutorNotFoundError(f"runtime.executor: {problem}")
    return (manager or get_plugin_manager()).registrar.executors[name]


def make_executor(executor: str | Executor = "asyncio", options: BaseModel | dict[str, Any] | None = None,
                  manager: PluginManager | None = None) -> Executor:
    """An executor from a name and its options (a model or a dict); an :class:`Executor` passes through.

    Options that belong to another registered executor (``[runtime.ray]`` while the executor is
    ``asyncio``) are left for when that one is selected.
    """
    others = tuple(e.options for e in (manager or get_plugin_manager()).registrar.executors.values() if e.options)
    if isinstance(executor, Executor):
        if options is not None and not isinstance(options, others):
            raise ConfigError("pass executor options to the executor object itself, not next to it")
        return executor
    entry = executor_entry(executor, manager)
    cls, model = entry.load(), entry.options
    assert model is not None  # an executor's entry always has its options model
    if options is None or (isinstance(options, others) and not isinstance(options, model)):
        return cls(model())  # no settings, or another executor's, kept for when it is selected
    if isinstance(options, model):
        return cls(options)
    if isinstance(options, BaseModel):
        options = options.model_dump()
    try:
        return cls(model.model_validate(options))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, prefix=f"runtime.{executor}")) from exc
