"""``tackroom matrix`` config: a task set × models × harness rows, one sandbox, one verifier, ``passes`` each.

```toml
tasks = ["../tasks"]
passes = 3                     # trials per (model, harness, task)
k = 3                          # the headline pass@k (default: passes)

[sandbox]
name = "local"
[verifier]
name = "test-script"

[[models]]
label = "smollm2"
base_url = "http://127.0.0.1:8011/v1"   # what `tackroom model up` prints

[[harnesses]]
name = "oracle"
[[harnesses]]
name = "terminus"
label = "terminus-20"
if_installed = true
options = { max_turns = 20 }

[runtime]
concurrency = 4
```

The model axis applies only to harnesses that call a model (capability
``needs_policy``); a harness that does not (``oracle``, ``nop``) runs once
per task and pass, as a reference row, whatever the models are.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from tackroom import ConfigError
from tackroom.services import redact
from tackroom_app import (
    Endpoint,
    FieldError,
    PluginNotFoundError,
    PluginSelection,
    RuntimeConfig,
    TaskSelection,
    format_validation_error,
    read_toml,
    register_secrets_in,
    resolve_runtime,
    slug,
    validate,
)


def _model_endpoint(model: Endpoint) -> Endpoint:
    """A ``[[models]]`` entry names an endpoint (a matrix column of no model means nothing) and has a label."""
    if not model.configured:
        raise ValueError("give base_url (an OpenAI-compatible endpoint, e.g. the one `tackroom model up` "
                         "prints) or litellm (a model name served by a LiteLLM proxy)")
    if model.label is None:
        model.label = model.served_name or _host(model.endpoint)
    return model


def _host(url: str) -> str:
    """The host of ``url``, never its credentials (a label is written everywhere)."""
    host = url.split("://", 1)[-1].split("/", 1)[0]
    return host.rsplit("@", 1)[-1] or "model"


ModelEntry = Annotated[Endpoint, AfterValidator(_model_endpoint)]
"""``[[models]]``: one :class:`~tackroom_app.Endpoint`, with the label its column carries in every report."""


class HarnessRow(BaseModel):
    """``[[harnesses]]``: a harness name plus one option set; the same harness twice (two labels) is two rows."""

    model_config = ConfigDict(extra="forbid")

    name: str
    label: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    if_installed: bool = False
    """Skip this row (with a notice) when no harness of this name is installed, instead of failing."""

    @model_validator(mode="after")
    def _remember_secrets(self) -> HarnessRow:
        register_secrets_in(self.options)
        return self

    @property
    def row_label(self) -> str:
        return self.label or self.name

    def identity(self) -> dict[str, Any]:
        return redact({"name": self.name, "options": self.options})


class TransferConfig(BaseModel):
    """``[transfer]``: the before/after comparison (default: the first model against each other model)."""

    model_config = ConfigDict(extra="forbid")

    baseline: str | None = None
    candidates: list[str] = Field(default_factory=list)


class MatrixConfig(TaskSelection):
    """A ``tackroom matrix`` config file (see the module docstring for an example)."""

    model_config = ConfigDict(extra="forbid")

    title: str | None = None
    models: list[ModelEntry] = Field(default_factory=list)
    harnesses: list[HarnessRow] = Field(default_factory=lambda: [HarnessRow(name="oracle"), HarnessRow(name="nop")])
    sandbox: PluginSelection = Field(default_factory=lambda: PluginSelection(name="local"))
    verifier: PluginSelection = Field(default_factory=lambda: PluginSelection(name="test-script"))
    passes: int = Field(default=1, ge=1, le=1000, strict=True)
    k: int | None = Field(default=None, ge=1, strict=True)
    """The headline pass@k (default: ``passes``); pass@j for every j ≤ passes is reported too."""
    pass_threshold: float = 1.0
    """A trial passes when its reward is at least this."""
    require_models: bool = False
    """Stop before running when a model endpoint is unreachable (default: mark its cells as infra errors)."""
    probe_timeout_sec: float = Field(default=5.0, gt=0, le=3600, allow_inf_nan=False)
    transfer: TransferConfig = Field(default_factory=TransferConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)

    @field_validator("pass_threshold")
    @classmethod
    def _finite_threshold(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {value!r}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> MatrixConfig:
        if self.k is None:
            self.k = self.passes
        elif self.k > self.passes:
            raise FieldError("k", f"pass@{self.k} needs at least {self.k} passes; passes is {self.passes}")
        _unique([m.label for m in self.models], "models", "label", "model")
        _unique([h.row_label for h in self.harnesses], "harnesses", "label", "harness row",
                hint="give each row of the same harness a distinct label")
        if not self.harnesses:
            raise FieldError("harnesses", "list at least one harness (e.g. [[harnesses]] name = \"oracle\")")
        labels = [m.label for m in self.models]
        t = self.transfer
        for field, names in (("baseline", [t.baseline] if t.baseline else []), ("candidates", t.candidates)):
            for name in names:
                if name not in labels:
                    raise FieldError(f"transfer.{field}", f"{name!r} is not a model label; "
                                      f"model labels: {', '.join(map(str, labels)) or '(none)'}")
        return self

    def transfer_pairs(self) -> list[tuple[str, str]]:
        """(baseline, candidate) model labels the transfer view compares."""
        labels = [str(m.label) for m in self.models]
        if len(labels) < 2 and not self.transfer.candidates:
            return []
        base = self.transfer.baseline or labels[0]
        cands = self.transfer.candidates or [label for label in labels if label != base]
        return [(base, c) for c in cands if c != base]




def _unique(values: list[Any], section: str, field: str, what: str, hint: str = "") -> None:
    seen: dict[Any, int] = {}
    for i, v in enumerate(values):
        if v in seen:
            extra = f"; {hint}" if hint else ""
            raise FieldError(f"{section}[{i}].{field}",
                              f"{what} label {v!r} is already used by {section}[{seen[v]}]{extra}")
        seen[v] = i


def _format(exc: ValidationError, source: str) -> str:
    message = format_validation_error(exc, source=source)
    if any(e["type"] == "extra_forbidden" and len(e["loc"]) == 3 and e["loc"][0] == "harnesses" for e in exc.errors()):
        message += "\n(a harness's own options go in its `options` table, e.g. options = { max_turns = 20 })"
    return message


def parse_matrix_config(data: dict[str, Any], *, source: str = "matrix config", base_dir: Path | None = None
                        ) -> MatrixConfig:
    """Validate a matrix config mapping; relative task paths resolve against ``base_dir``."""
    try:
        config = MatrixConfig.model_validate(data)
    except ValidationError as exc:
        message = _format(exc, source)
        if any(e["type"] == "extra_forbidden" for e in exc.errors()):
            message += "\nvalid top-level fields: " + ", ".join(MatrixConfig.model_fields)
        raise ConfigError(message) from exc
    if base_dir is not None:
        config.tasks = [t if Path(t).is_absolute() else str((base_dir / t).resolve()) for t in config.tasks]
    return config


def load_matrix_config(path: str | Path) -> MatrixConfig:
    """Read and validate a matrix config file; errors name the file and the dotted path."""
    p = Path(path)
    config = parse_matrix_config(read_toml(p), source=str(p), base_dir=p.resolve().parent)
    resolve_runtime(config.runtime, source=str(p))
    if config.runtime.run_id is None:
        config.runtime.run_id = default_run_id(p)
    if config.title is None:
        config.title = p.stem
    return config


def default_run_id(path: Path) -> str:
    """``matrix-<config file stem>``, made a plain folder name."""
    name = slug(path.stem)
    while ".." in name:
        name = name.replace("..", ".")
    return f"matrix-{name.strip('.') or 'config'}"[:100]


class ResolvedRow(BaseModel):
    """A harness row whose plugin class and options have been checked."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: int
    row: HarnessRow
    cls: Any
    options: Any

    @property
    def label(self) -> str:
        return self.row.row_label

    @property
    def needs_policy(self) -> bool:
        return "needs_policy" in self.cls.capabilities


def resolve_plugins(config: MatrixConfig, manager: Any = None) -> tuple[list[ResolvedRow], Any, Any, list[str]]:
    """Resolve every harness row, the sandbox and the verifier by name and validate their options.

    Returns (rows, sandbox provider, verifier, notices); rows marked
    ``if_installed`` whose harness is missing are left out with a notice.
    """
    from tackroom_app import get_plugin_manager, instantiate

    manager = manager or get_plugin_manager()
    rows: list[ResolvedRow] = []
    notices: list[str] = []
    for i, row in enumerate(config.harnesses):
        where = f"harnesses[{i}]"
        try:
            cls = manager.get("harness", row.name)
        except PluginNotFoundError as exc:
            if row.if_installed:
                notices.append(f"harness row {row.row_label!r} skipped: {row.name!r} is not installed")
                continue
            raise PluginNotFoundError(f"{where}.name: {exc}") from None
        options = validate(cls.Options, row.options, prefix=f"{where}.options")
        resolved = ResolvedRow(index=i, row=row, cls=cls, options=options)
        if resolved.needs_policy and not config.models:
            raise ConfigError(f"{where}: harness {row.name!r} calls a model: add a [[models]] entry with the "
                              "base_url `tackroom model up` prints (or a litellm name)")
        rows.append(resolved)
    if not rows:
        raise ConfigError("harnesses: none of the listed harnesses is installed; installed harnesses: "
                          + ", ".join(e.name for e in manager.entries("harness")))
    if config.models and not any(r.needs_policy for r in rows):
        notices.append("no listed harness calls a model, so the [[models]] are not used "
                       "(install a model harness, e.g. tackroom-terminus, to fill the model columns)")
    sandbox = instantiate("sandbox", config.sandbox, where="sandbox", manager=manager)
    verifier = instantiate("verifier", config.verifier, where="verifier", manager=manager)
    return rows, sandbox, verifier, notices
