"""Names in a parsed config, resolved against the plugin registry: plugins, executors, their options.

Parsing (core's ``tackroom._config``) never asks the registry, so config models stay importable by everything the
registry imports; this module asks, after parsing. A class registered by reference is imported when built; an
executor is built by core (``tackroom.executors.make_executor``), which also says which executors exist.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ValidationError

from tackroom._config import (
    PluginSelection,
    RunConfig,
    RuntimeConfig,
    format_validation_error,
    located,
    parse_run_config,
    validate,
)
from tackroom._errors import ConfigError, PluginNotFoundError
from tackroom._manager import PluginManager, get_plugin_manager
from tackroom._plugin import PluginKind
from tackroom._resolve import executor_entry, unknown_executor_message


def instantiate(kind: PluginKind, selection: PluginSelection | str, *, where: str = "",
                manager: PluginManager | None = None) -> Any:
    """Resolve a plugin by name and build it with validated options.

    Unknown names raise :class:`PluginNotFoundError` listing the installed plugins of that kind (and
    the install line when the catalogue knows the name); a plugin written for another plugin
    contract raises :class:`~tackroom._errors.PluginIncompatibleError`; bad options raise
    :class:`ConfigError` with the dotted path.
    """
    manager = manager or get_plugin_manager()
    if isinstance(selection, str):
        selection = PluginSelection(name=selection)
    where = where or kind
    try:
        cls = manager.get(kind, selection.name)
    except PluginNotFoundError as exc:
        raise PluginNotFoundError(f"{where}.name: {exc}") from None
    options = validate(cls.Options, selection.options, prefix=where)
    return (cls, options) if kind == "loss" else cls(options)  # a loss is a LossSpec, not a class to build


def _registered_executor(name: str) -> str:
    problem = unknown_executor_message(name)
    if problem is not None:
        raise ValueError(problem)
    return name


ExecutorName = Annotated[str, AfterValidator(_registered_executor)]
"""An executor's name checked against those registered when the model holding it is validated (for an
application's own config; core's :class:`RuntimeConfig` is checked by :func:`resolve_runtime` instead)."""


def resolve_runtime(runtime: RuntimeConfig, *, where: str = "runtime", source: str = "",
                    flags: dict[str, str] | None = None, manager: PluginManager | None = None) -> RuntimeConfig:
    """Check ``runtime.executor`` against the registered executors and validate each ``[runtime.<name>]``
    table through its executor's options model (kept on ``runtime``, which is returned).

    A problem is reported as ``source: runtime.executor: …``, or ``--flag (runtime.executor): …`` when
    ``flags`` maps that dotted path to the command-line flag that sets it; every problem is listed.
    """
    problems: list[str] = []
    if (problem := unknown_executor_message(runtime.executor, manager)) is not None:
        problems.append(f"{located(f'{where}.executor', source, flags)}: {problem}")
    extra = runtime.__pydantic_extra__ or {}
    for name, table in extra.items():
        path = f"{where}.{name}"
        problem = unknown_executor_message(name, manager)
        if problem is None:
            options = executor_entry(name, manager).options
            assert options is not None
            if isinstance(table, options):
                continue
            try:
                extra[name] = options.model_validate(table.model_dump() if isinstance(table, BaseModel) else table)
            except ValidationError as exc:
                problems.append(format_validation_error(exc, prefix=path, source=source))
        else:  # parsing let only tables through
            problems.append(f"{located(path, source, flags)}: a table of executor options, "
                            f"but {problem}")
    if problems:
        raise ConfigError("\n".join(problems))
    return runtime


def resolve_run_config(config: RunConfig, *, source: str = "", flags: dict[str, str] | None = None,
                       manager: PluginManager | None = None) -> RunConfig:
    """A parsed run config with its names resolved (executor and executor tables; plugins are resolved when
    :func:`instantiate` builds them)."""
    resolve_runtime(config.runtime, source=source, flags=flags, manager=manager)
    return config


def load_run_config(path: str | Path) -> RunConfig:
    """Read and validate a run config and resolve its names; relative task paths resolve against the file's
    folder."""
    return resolve_run_config(parse_run_config(path), source=str(path))
