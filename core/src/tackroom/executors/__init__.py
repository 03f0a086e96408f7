"""Executors: where trial attempts run (``[runtime] executor``).

``asyncio`` (default) runs attempts as coroutines in this process; ``ray``
runs each attempt as a Ray task in its own worker process, on a local or an
existing Ray cluster. Ray is imported only when the ``ray`` executor starts.
See ``README.md`` next to this file.
"""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import BaseModel, ValidationError

from tackroom.errors import ConfigError
from tackroom.executors.asyncio import AsyncioExecutor
from tackroom.executors.base import Executor, NoOptions
from tackroom.executors.errors import (
    AttemptDeadlineError,
    ExecutorNotFoundError,
    ExecutorUnavailableError,
    PluginNotShippableError,
    WorkerLostError,
)
from tackroom.executors.options import RayOptions

EXECUTORS: dict[str, str] = {
    "asyncio": "tackroom.executors.asyncio:AsyncioExecutor",
    "ray": "tackroom.executors.ray:RayExecutor",
}
"""Executor name → ``module:Class``, imported only when selected."""

OPTION_MODELS: dict[str, type[BaseModel]] = {"asyncio": NoOptions, "ray": RayOptions}


def executor_class(name: str) -> type[Executor]:
    """The executor class called ``name``; :class:`ExecutorNotFoundError` listing the executors otherwise."""
    reference = EXECUTORS.get(name)
    if reference is None:
        raise ExecutorNotFoundError(
            f"runtime.executor: {name!r} is not an executor; available: {', '.join(EXECUTORS)}")
    module, _, qualname = reference.partition(":")
    return getattr(importlib.import_module(module), qualname)


def make_executor(executor: str | Executor = "asyncio", options: BaseModel | dict[str, Any] | None = None) -> Executor:
    """An executor from a name and its options (a model or a dict); an :class:`Executor` passes through.

    Options that belong to another executor (``[runtime.ray]`` while the
    executor is ``asyncio``) are left for when that one is selected.
    """
    if isinstance(executor, Executor):
        if options is not None and not isinstance(options, tuple(OPTION_MODELS.values())):
            raise ConfigError("pass executor options to the executor object itself, not next to it")
        return executor
    from tackroom.config import format_validation_error  # config imports this package's options

    cls = executor_class(executor)
    model = OPTION_MODELS[executor]
    if options is None:
        return cls(model())
    if isinstance(options, model):
        return cls(options)
    if isinstance(options, tuple(OPTION_MODELS.values())):
        return cls(model())  # another executor's settings, kept for when it is selected
    if isinstance(options, BaseModel):
        options = options.model_dump()
    try:
        return cls(model.model_validate(options))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, prefix=f"runtime.{executor}")) from exc


__all__ = [
    "EXECUTORS",
    "AsyncioExecutor",
    "AttemptDeadlineError",
    "Executor",
    "ExecutorNotFoundError",
    "ExecutorUnavailableError",
    "PluginNotShippableError",
    "RayOptions",
    "WorkerLostError",
    "executor_class",
    "make_executor",
]
