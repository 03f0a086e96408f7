"""Executors: where trial attempts run (``[runtime] executor``).

Executors are plugins: each is registered through the ``tackroom_executors``
hook, with the pydantic model of its ``[runtime.<name>]`` table. Core
registers ``asyncio`` (attempts as coroutines in this process, the default);
``tackroom-ray`` registers ``ray`` (each attempt a Ray task). They are looked
up in the process-wide plugin manager unless one is passed; a class
registered lazily is imported only when its executor is built, so ``import
tackroom`` never imports Ray. See ``README.md`` next to this file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from tackroom._attempt import AttemptDeadlines, AttemptPlan, PluginRef, run_attempt
from tackroom._config import format_validation_error
from tackroom._errors import ConfigError
from tackroom.executors.asyncio import AsyncioExecutor
from tackroom.executors.base import Executor, NoOptions
from tackroom.executors.errors import ExecutorNotFoundError, ExecutorUnavailableError

if TYPE_CHECKING:
    from tackroom._manager import PluginManager
    from tackroom._registrar import ExecutorEntry

INSTALL_HINTS = {"ray": "pip install tackroom-ray (or pip install ./packages/ray from a checkout of the tackroom "
                        "repository)"}
"""Executors this project ships outside core, and how to get them."""


def _manager(manager: PluginManager | None) -> PluginManager:
    from tackroom._manager import get_plugin_manager

    return manager or get_plugin_manager()


def _registered(manager: PluginManager | None) -> dict[str, ExecutorEntry]:
    return _manager(manager).registrar.executors


def unknown_executor_message(name: str, manager: PluginManager | None = None) -> str | None:
    """``None`` when ``name`` is a registered executor, else why not: what exists, and how to install it."""
    manager = _manager(manager)
    registered = manager.registrar.executors
    if name in registered:
        return None
    message = f"{name!r} is not an executor; available: {', '.join(sorted(registered)) or '(none)'}"
    if name in INSTALL_HINTS:
        message += f". The {name} executor is a package of its own: {INSTALL_HINTS[name]}"
    if manager.skipped:
        message += f". Skipped plugins: {', '.join(manager.skipped)}"
    if manager.broken:
        message += f". Plugins that failed to import: {'; '.join(manager.broken)}"
    return message


def executor_entry(name: str, manager: PluginManager | None = None) -> ExecutorEntry:
    """The registered executor ``name``; :class:`ExecutorNotFoundError` listing the executors otherwise."""
    problem = unknown_executor_message(name, manager)
    if problem is not None:
        raise ExecutorNotFoundError(f"runtime.executor: {problem}")
    return _registered(manager)[name]


def executor_class(name: str, manager: PluginManager | None = None) -> type[Executor]:
    """The executor class called ``name`` (imported now if it was registered lazily)."""
    return executor_entry(name, manager).load()


def make_executor(executor: str | Executor = "asyncio", options: BaseModel | dict[str, Any] | None = None,
                  manager: PluginManager | None = None) -> Executor:
    """An executor from a name and its options (a model or a dict); an :class:`Executor` passes through.

    Options that belong to another registered executor (``[runtime.ray]``
    while the executor is ``asyncio``) are left for when that one is selected.
    """
    others = tuple(e.options for e in _registered(manager).values())
    if isinstance(executor, Executor):
        if options is not None and not isinstance(options, others):
            raise ConfigError("pass executor options to the executor object itself, not next to it")
        return executor
    entry = executor_entry(executor, manager)
    cls = entry.load()
    if options is None or (isinstance(options, others) and not isinstance(options, entry.options)):
        return cls(entry.options())  # no settings, or another executor's, kept for when it is selected
    if isinstance(options, entry.options):
        return cls(options)
    if isinstance(options, BaseModel):
        options = options.model_dump()
    try:
        return cls(entry.options.model_validate(options))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, prefix=f"runtime.{executor}")) from exc


__all__ = [
    "AsyncioExecutor",
    "AttemptDeadlines",
    "AttemptPlan",
    "PluginRef",
    "run_attempt",
    "Executor",
    "ExecutorNotFoundError",
    "ExecutorUnavailableError",
    "NoOptions",
    "executor_class",
    "executor_entry",
    "make_executor",
    "unknown_executor_message",
]
