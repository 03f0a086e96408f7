"""TOML config, validated by pydantic, with errors that name the dotted path and what exists."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tackroom.errors import ConfigError, PluginNotFoundError
from tackroom.executors.options import RayOptions
from tackroom.plugin import Plugin, PluginKind

M = TypeVar("M", bound=BaseModel)


class PluginSelection(BaseModel):
    """``[harness]`` / ``[sandbox]`` / ``[verifier]``: a ``name`` plus that plugin's options, flat."""

    model_config = ConfigDict(extra="allow")

    name: str

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


def format_validation_error(exc: ValidationError, prefix: str = "", source: str = "") -> str:
    """One line per problem: ``source: dotted.path: message``."""
    lines = []
    for err in exc.errors():
        path = ".".join(str(p) for p in (prefix.split(".") if prefix else []) + list(err["loc"]))
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        lines.append(f"{source + ': ' if source else ''}{path or '(top level)'}: {msg}")
    return "\n".join(lines)


def validate(model: type[M], data: Any, *, prefix: str = "", source: str = "") -> M:
    """``model.model_validate(data)`` with a :class:`ConfigError` naming every bad dotted path."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        message = format_validation_error(exc, prefix, source)
        for loc in dict.fromkeys(tuple(e["loc"][:-1]) for e in exc.errors() if e["type"] == "extra_forbidden"):
            owner = _model_at(model, loc)
            if owner is not None:
                where = ".".join(p for p in (prefix, *map(str, loc)) if p)
                fields = ", ".join(sorted(owner.model_fields)) or "(none)"
                message += f"\nvalid fields{' of ' + where if where else ''}: {fields}"
        raise ConfigError(message) from exc


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model a validation error's location (minus its last part) points into, when it is one."""
    import typing

    current: Any = model
    for part in loc:
        if not (isinstance(current, type) and issubclass(current, BaseModel)) or part not in current.model_fields:
            return None
        annotation = current.model_fields[part].annotation
        candidates = [a for a in (annotation, *typing.get_args(annotation))
                      if isinstance(a, type) and issubclass(a, BaseModel)]
        if not candidates:
            return None
        current = candidates[0]
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def read_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file; missing files and syntax errors become :class:`ConfigError`."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: config file not found")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML: {exc}") from exc


def instantiate(kind: PluginKind, selection: PluginSelection | str, *, where: str = "", manager: Any = None) -> Any:
    """Resolve a plugin by name and build it with validated options.

    Unknown names raise :class:`PluginNotFoundError` listing the installed
    plugins of that kind (and the install line when the catalogue knows the
    name); bad options raise :class:`ConfigError` with the dotted path.
    """
    from tackroom.manager import get_plugin_manager

    manager = manager or get_plugin_manager()
    if isinstance(selection, str):
        selection = PluginSelection(name=selection)
    where = where or kind
    try:
        cls = manager.get(kind, selection.name)
    except PluginNotFoundError as exc:
        raise PluginNotFoundError(f"{where}.name: {exc}") from None
    if kind == "loss":
        options = validate(cls.Options, selection.options, prefix=where)
        return cls, options
    assert issubclass(cls, Plugin)
    options = validate(cls.Options, selection.options, prefix=where)
    return cls(options)


class PolicyConfig(BaseModel):
    """``[policy]``: the model endpoint harnesses call (see :class:`tackroom.policy.Policy`)."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = None
    model: str = "default"
    api_key: str = "EMPTY"
    tokenizer: str | None = None
    sampling: dict[str, Any] = Field(default_factory=dict)
    label: str | None = None
    gateway: bool | None = None
    """Route through the policy gateway; default: when the harness speaks only chat."""


class RuntimeConfig(BaseModel):
    """``[runtime]``: how trials are run."""

    model_config = ConfigDict(extra="forbid")

    attempts: int = Field(default=3, ge=1)
    concurrency: int = Field(default=4, ge=1)
    out: str = "runs"
    run_id: str | None = None
    executor: Literal["asyncio", "ray"] = "asyncio"
    """Where attempts run: in this process (``asyncio``) or each as a Ray task (``ray``)."""
    teardown_timeout_sec: float = 60.0
    retry_backoff_sec: float = 1.0
    ray: RayOptions = Field(default_factory=RayOptions)
    """``[runtime.ray]``: options of the ``ray`` executor."""


class RunConfig(BaseModel):
    """A ``tackroom run`` config file.

    ```toml
    tasks = ["examples/tasks"]
    [harness]
    name = "oracle"
    [sandbox]
    name = "local"
    [verifier]
    name = "test-script"
    ```
    """

    model_config = ConfigDict(extra="forbid")

    tasks: list[str] = Field(default_factory=list)
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    harness: PluginSelection = Field(default_factory=lambda: PluginSelection(name="oracle"))
    sandbox: PluginSelection = Field(default_factory=lambda: PluginSelection(name="local"))
    verifier: PluginSelection = Field(default_factory=lambda: PluginSelection(name="test-script"))
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)

    def build_plugins(self, manager: Any = None) -> tuple[Any, Any, Any]:
        """Instantiate (harness, sandbox provider, verifier), validating every option."""
        return (
            instantiate("harness", self.harness, where="harness", manager=manager),
            instantiate("sandbox", self.sandbox, where="sandbox", manager=manager),
            instantiate("verifier", self.verifier, where="verifier", manager=manager),
        )


def load_run_config(path: str | Path) -> RunConfig:
    """Read and validate a run config; relative task paths resolve against the file's folder."""
    p = Path(path)
    config = validate(RunConfig, read_toml(p), source=str(p))
    config.tasks = [str((p.parent / t).resolve()) if not Path(t).is_absolute() else t for t in config.tasks]
    return config
