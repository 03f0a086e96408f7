"""TOML config, validated by pydantic, with errors that name the dotted path and what exists."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import InitErrorDetails

from tackroom._endpoint import Endpoint
from tackroom._errors import ConfigError
from tackroom._policy import register_secrets_in
from tackroom._sandbox import NetworkPolicy

M = TypeVar("M", bound=BaseModel)

RUN_ID_MAX_CHARS = 128


def check_run_id(value: str, *, what: str = "run id") -> str:
    """A run id names one folder under the runs directory: a plain name, never a path.

    Refused: empty or blank, ``.``/``..`` or anything containing ``..``, a path separator
    (``/``, ``\\``), control characters (NUL, newline …), a leading ``-`` or ``~``, more than
    :data:`RUN_ID_MAX_CHARS` characters.
    """
    problem = None
    if not isinstance(value, str) or not value.strip():
        problem = "must not be empty"
    elif value != value.strip():
        problem = "must not start or end with whitespace"
    elif "/" in value or "\\" in value:  # both separators, whatever this OS uses
        problem = "must be a plain name, not a path (no / or \\)"
    elif ".." in value or value == ".":
        problem = "must not be . or contain .."
    elif any(ord(c) < 32 or ord(c) == 127 for c in value):
        problem = "must not contain control characters"
    elif value[0] in "-~":
        problem = "must not start with - or ~"
    elif len(value) > RUN_ID_MAX_CHARS:
        problem = f"must be at most {RUN_ID_MAX_CHARS} characters"
    if problem:
        raise ValueError(f"{what} {value!r} {problem}")
    return value


RunId = Annotated[str, AfterValidator(check_run_id)]


def finite_positive(value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"must be a positive, finite number, got {value!r}")
    return value


class FieldError(ValueError):
    """A cross-field problem raised in a validator, reported under its own dotted ``path``."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


class PluginSelection(BaseModel):
    """``[harness]`` / ``[sandbox]`` / ``[verifier]``: a ``name`` plus that plugin's options, in an ``options = {…}``
    table or flat beside ``name``; credentials among them are registered for redaction (:mod:`tackroom._policy`)."""

    model_config = ConfigDict(extra="allow")

    name: str

    @model_validator(mode="before")
    @classmethod
    def _options_table(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "options" not in data:
            return data
        table = data["options"]
        if not isinstance(table, dict):
            raise FieldError("options", f"must be a table of the plugin's options, got {type(table).__name__}")
        flat = {k: v for k, v in data.items() if k != "options"}
        if twice := sorted(set(flat) & set(table) - {"name"}):
            raise FieldError("options", f"{', '.join(twice)} given both in `options` and beside `name`; keep one")
        if "name" in table:
            raise FieldError("options.name", "the plugin's name goes beside `options`, not in it")
        return {**flat, **table}

    @model_validator(mode="after")
    def _remember_secrets(self) -> PluginSelection:
        register_secrets_in(self.model_extra or {})
        return self

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


def dotted(loc: tuple[Any, ...] | list[Any]) -> str:
    """``("models", 1, "label")`` → ``models[1].label``."""
    parts = (f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)
    return "".join(parts).removeprefix(".")


def located(path: str, source: str = "", flags: dict[str, str] | None = None) -> str:
    """Where a problem at dotted ``path`` is reported: ``--flag (path)`` when ``flags`` maps it (or a
    table above it) to the command-line flag that set it, else ``source: path``."""
    for key, flag in (flags or {}).items():
        if path == key or path.startswith(key + "."):
            return f"{flag} ({path})"
    return f"{source + ': ' if source else ''}{path or '(top level)'}"


def _message(err: Any) -> str:
    return "unknown field" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")


def format_validation_error(exc: ValidationError, prefix: str = "", source: str = "", *, sep: str = "\n") -> str:
    """One entry per problem: ``source: dotted.path[i]: message`` (unknown fields say so; a
    :class:`FieldError` raised in a validator keeps its own path)."""
    lines = []
    for err in exc.errors():
        ctx_error = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_error, FieldError):
            path, msg = ".".join(p for p in (prefix, ctx_error.path) if p), ctx_error.message
        else:
            loc = [p for p in err["loc"] if p != "function-after"]
            path, msg = dotted([*(prefix.split(".") if prefix else []), *loc]), _message(err)
        lines.append(f"{located(path, source)}: {msg}")
    return sep.join(lines)


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
    current = model  # always a model: each step moves to one or stops
    for part in loc:
        if part not in current.model_fields:
            return None
        annotation = current.model_fields[part].annotation
        candidates = [a for a in (annotation, *get_args(annotation))
                      if isinstance(a, type) and issubclass(a, BaseModel)]
        if not candidates:
            return None
        current = candidates[0]
    return current


def read_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file; missing files and syntax errors become :class:`ConfigError`."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: config file not found")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML: {exc}") from exc


class NetworkDefaults(BaseModel):
    """``[runtime] network``: the network of each phase for tasks whose task.toml declares none (a task's own
    ``network_mode`` / ``allow_internet`` always wins). A phase is ``"none"`` (Harbor's ``"no-network"``),
    ``"public"`` or ``{mode = "allowlist", allowed_hosts = [...]}``; ``network = "public"`` sets both phases
    (``--allow-internet``). Keeping ``agent`` offline while ``grading`` is public lets test.sh fetch its tools."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: NetworkPolicy = NetworkPolicy()
    grading: NetworkPolicy = NetworkPolicy()

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str):
            data = {"agent": data, "grading": data}
        if isinstance(data, dict):
            data = {k: {"mode": v} if isinstance(v, str) else v for k, v in data.items()}
        return data


class RuntimeConfig(BaseModel):
    """``[runtime]``: how trials are run. A ``[runtime.<executor>]`` table holds that executor's options, kept as
    given here; ``tackroom_app.resolve_runtime`` checks the names and validates each table."""

    model_config = ConfigDict(extra="allow")

    attempts: int = Field(default=3, ge=1, strict=True)
    concurrency: int = Field(default=4, ge=1, strict=True)
    prepare_ahead: int = Field(default=0, ge=0, strict=True)
    """Trials started and set up (sandbox up, a world's servers listening) beyond ``concurrency``, each waiting,
    idle, for a turn: start-up runs while other trials' agents do. Each holds a started sandbox (memory, not CPU)."""
    out: str = "runs"
    run_id: RunId | None = None
    """A plain folder name under ``out`` (no path separators, no ``..``); default: a fresh, unique one."""
    executor: str = "asyncio"
    """Where attempts run: ``asyncio`` (in this process), ``ray`` (tackroom-ray), or any registered executor."""
    teardown_timeout_sec: Annotated[float, AfterValidator(finite_positive)] = 60.0
    retry_backoff_sec: float = Field(default=1.0, ge=0, allow_inf_nan=False)
    network: NetworkDefaults = NetworkDefaults()
    """The network of tasks that declare none (see :class:`NetworkDefaults`; ``--allow-internet``)."""
    force_build: bool = False
    """Build each task's ``environment/`` even when it names a ``docker_image`` (``--force-build``, as Harbor's)."""

    @model_validator(mode="after")
    def _only_tables_besides_fields(self) -> RuntimeConfig:
        """Anything but a table beside the fields is a misspelt field (a table is an executor's options)."""
        errors = [InitErrorDetails(type="extra_forbidden", loc=(name,), input=value)  # type: ignore[typeddict-item]
                  for name, value in (self.__pydantic_extra__ or {}).items() if not isinstance(value, dict | BaseModel)]
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    def executor_options(self) -> BaseModel | dict[str, Any] | None:
        """The selected executor's ``[runtime.<executor>]`` options (a model once resolved); ``None`` without one."""
        return (self.model_extra or {}).get(self.executor)


class TaskSelection(BaseModel):
    """Which tasks a config runs: ``tasks`` (task or dataset directories) narrowed by ``include`` /
    ``exclude`` (glob patterns over task ids). The run, matrix and train configs (and the trainer's
    ``[eval]``) all select tasks with these three fields."""

    model_config = ConfigDict(extra="forbid")

    tasks: list[str] = Field(default_factory=list)
    """Task directories or dataset directories (directories of tasks)."""
    include: list[str] = Field(default_factory=list)
    """Only task ids matching one of these patterns (default: all)."""
    exclude: list[str] = Field(default_factory=list)
    """Leave out task ids matching one of these patterns."""


class RunConfig(TaskSelection):
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

    harness: PluginSelection = Field(default_factory=lambda: PluginSelection(name="oracle"))
    sandbox: PluginSelection = Field(default_factory=lambda: PluginSelection(name="local"))
    verifier: PluginSelection = Field(default_factory=lambda: PluginSelection(name="test-script"))
    policy: Endpoint = Field(default_factory=Endpoint)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)


def with_overrides(config: M, overrides: dict[str, Any], *, source: str = "",
                   flags: dict[str, str] | None = None) -> M:
    """``config`` with dotted-path overrides (``{"runtime.concurrency": 0}``) applied and the whole of it
    validated again, so a command-line flag gets exactly the checks its config field gets.

    ``flags`` maps dotted paths to the flag that set them: a problem there is ``--flag (dotted.path): …``, one from
    the file ``source: dotted.path: …``; ``SecretStr`` values pass through unrevealed.
    """
    data = config.model_dump(mode="python")
    for dotted, value in overrides.items():
        *parents, last = dotted.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    try:
        return type(config).model_validate(data)
    except ValidationError as exc:
        lines = [f"{located('.'.join(map(str, err['loc'])), source, flags)}: {_message(err)}"
                 for err in exc.errors()]
        raise ConfigError("\n".join(lines)) from exc


def parse_run_config(path: str | Path) -> RunConfig:
    """Read and validate a run config, names not yet resolved (``tackroom_app.load_run_config`` does both);
    relative task paths resolve against the file's folder."""
    p = Path(path)
    config = validate(RunConfig, read_toml(p), source=str(p))
    config.tasks = [str((p.parent / t).resolve()) if not Path(t).is_absolute() else t for t in config.tasks]
    return config
