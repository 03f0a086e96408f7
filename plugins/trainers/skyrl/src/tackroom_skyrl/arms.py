"""``[[arms]]`` and ``[eval]`` in a train config: the guide's Step 4 (loss × aggregation × nudge ablations).

```toml
[[arms]]                      # each arm: the base config with these overrides, nothing else changed
label = "dppo-token"          # its folder: <run>/arms/<label>/
loss = { name = "dppo", aggregation = "token_mean" }
nudge = false                 # the harness's context-budget nudge off (archipelago: budget_nudge_ratio = None)
harness = { max_steps = 20 }  # any other option of the [harness] (checked against its Options)

[eval]                        # after training: serve the final policy, evaluate it with the matrix
passes = 3
port = 8021
[[eval.harnesses]]
name = "answer"
options = { system = "Answer with one word only." }
```

Every arm keeps the base config's seed, tasks, model, ``[train]``, ``[tinker]`` …: only the fields an arm
names change (:func:`arm_configs`). The models here are plain pydantic (no plugin imports);
:func:`arm_configs` resolves loss and harness names with the plugin manager.
"""

from __future__ import annotations

import re
import typing
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tackroom import ConfigError
from tackroom.app import TaskSelection, with_overrides

if TYPE_CHECKING:
    from tackroom_skyrl.config import TrainConfig

LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def _known_fields(cls: type[BaseModel], data: Any, what: str) -> Any:
    """Refuse unknown keys with the list of the ones that exist (a list element's path has no model to name)."""
    if isinstance(data, dict):
        unknown = sorted(set(data) - set(cls.model_fields))
        if unknown:
            raise ValueError(f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                             f"{what} has: {', '.join(cls.model_fields)}")
    return data


class LossOverride(BaseModel):
    """An arm's ``loss``: any of ``[loss]``'s fields; those left out keep the base config's value."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    aggregation: Literal["token_mean", "sequence_mean", "prompt_mean"] | None = None
    options: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _fields(cls, data: Any) -> Any:
        return _known_fields(cls, data, "an arm's loss")


class ArmSpec(BaseModel):
    """One ``[[arms]]`` entry: a label and the overrides that make this arm different from the base config."""

    model_config = ConfigDict(extra="forbid")

    label: str
    """A plain folder name (letters, digits, ``.``, ``_``, ``-``): ``<run>/arms/<label>/``."""
    loss: LossOverride = Field(default_factory=LossOverride)
    nudge: bool | None = None
    """The harness's nudge option on or off (archipelago: ``budget_nudge_ratio``); None: as the base config."""
    harness: dict[str, Any] = Field(default_factory=dict)
    """Other ``[harness]`` options to override, checked against the harness's Options."""

    @model_validator(mode="before")
    @classmethod
    def _fields(cls, data: Any) -> Any:
        return _known_fields(cls, data, "an arm")

    @model_validator(mode="after")
    def _label(self) -> ArmSpec:
        if not LABEL.match(self.label):
            raise ValueError(f"label {self.label!r} must be a plain folder name: letters, digits, '.', '_', '-' "
                             "(up to 64, starting with a letter or digit)")
        return self


class EvalHarness(BaseModel):
    """``[[eval.harnesses]]``: a harness row of the evaluation matrix (as a matrix's ``[[harnesses]]``)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    label: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _fields(cls, data: Any) -> Any:
        data = _known_fields(cls, data, "an eval harness row (its own options go in `options`)")
        return data


class EvalSection(TaskSelection):
    """``[eval]``: after training, serve the final policy on ``port`` and evaluate it with the matrix.

    Default harness: the training ``[harness]`` with its options. Tasks, sandbox and verifier default to
    the training ones."""

    model_config = ConfigDict(extra="forbid")

    harnesses: list[EvalHarness] = Field(default_factory=list)
    passes: int = Field(default=3, ge=1, le=100)
    # tasks / include / exclude (TaskSelection): task or dataset directories, relative to the config file;
    # default: the training tasks.
    sandbox: dict[str, Any] | None = None
    """``{ name = …, … }``; default: the training ``[sandbox]``."""
    verifier: dict[str, Any] | None = None
    """``{ name = …, … }``; default: the training ``[verifier]``."""
    port: int = Field(default=8021, ge=1024, le=65535)
    """The evaluated policy's engine port (one engine at a time; stopped after each evaluation)."""
    sampling: dict[str, Any] = Field(default_factory=dict)
    """Sampling for the evaluation requests (e.g. ``{ temperature = 1.0 }``); default: each harness's own."""
    pass_threshold: float = 1.0
    concurrency: int = Field(default=2, ge=1)
    max_model_len: int = Field(default=4096, ge=256)
    kv_cache_gib: int = Field(default=2, ge=1)
    """The engine's KV cache (``VLLM_CPU_KVCACHE_SPACE``); vLLM refuses to start when less memory is free."""
    baseline: bool = False
    """Also evaluate the untrained base model (served the same way, as the ``base`` row)."""
    start_timeout_s: float = Field(default=900.0, gt=0)


def unique_labels(arms: list[ArmSpec]) -> None:
    seen: dict[str, int] = {}
    for i, arm in enumerate(arms):
        if arm.label in seen:
            raise ValueError(f"arms[{i}].label: {arm.label!r} is already arms[{seen[arm.label]}]'s label")
        if arm.label == "base":
            raise ValueError(f"arms[{i}].label: 'base' is the untrained model's row ([eval] baseline); pick another")
        seen[arm.label] = i


def nudge_field(options_cls: type[BaseModel]) -> str | None:
    """The harness option that switches its nudge: a field named ``*nudge*`` that is a bool or may be None."""
    for name, field in options_cls.model_fields.items():
        if "nudge" not in name:
            continue
        annotation = field.annotation
        if annotation is bool or type(None) in typing.get_args(annotation):
            return name
    return None


def _nudge_value(arm: ArmSpec, where: str, config: TrainConfig, options_cls: type[BaseModel]) -> tuple[str, Any]:
    field = nudge_field(options_cls)
    if field is None:
        raise ConfigError(f"{where}.nudge: harness {config.harness.name!r} has no nudge option; its options: "
                          f"{', '.join(options_cls.model_fields) or '(none)'}")
    is_bool = options_cls.model_fields[field].annotation is bool
    if not arm.nudge:
        return field, False if is_bool else None
    current = (config.harness.model_extra or {}).get(field, options_cls.model_fields[field].default)
    if current not in (None, False):
        return field, current
    if is_bool:
        return field, True
    raise ConfigError(f"{where}.nudge = true: {config.harness.name}'s {field} is off in the base config and has no "
                      f"default; give its value in the arm: harness = {{ {field} = … }}")


def arm_overrides(config: TrainConfig, index: int, arm: ArmSpec, manager: Any = None) -> dict[str, Any]:
    """The dotted paths (``loss.name``, ``harness.<option>`` …) this arm sets, checked against the plugins."""
    from tackroom.app import PluginNotFoundError, get_plugin_manager, validate

    manager = manager or get_plugin_manager()
    where = f"arms[{index}] ({arm.label})"
    overrides: dict[str, Any] = {}
    for key in ("name", "aggregation", "options"):
        value = getattr(arm.loss, key)
        if value is not None:
            overrides[f"loss.{key}"] = value
    if arm.loss.name is not None:
        try:
            manager.get("loss", arm.loss.name)
        except PluginNotFoundError as exc:
            raise ConfigError(f"{where}.loss.name: {exc}") from None
    if arm.harness or arm.nudge is not None:
        options_cls = manager.get("harness", config.harness.name).Options
        unknown = sorted(set(arm.harness) - set(options_cls.model_fields))
        if unknown:
            raise ConfigError(f"{where}.harness: {', '.join(map(repr, unknown))} not an option of harness "
                              f"{config.harness.name!r}; its options: {', '.join(options_cls.model_fields)}")
        overrides.update({f"harness.{k}": v for k, v in arm.harness.items()})
        if arm.nudge is not None:
            field, value = _nudge_value(arm, where, config, options_cls)
            if field in arm.harness:
                raise ConfigError(f"{where}: give the nudge either as nudge = … or as harness.{field}, not both")
            overrides[f"harness.{field}"] = value
        merged = {**(config.harness.model_extra or {}), **{k.split(".", 1)[1]: v for k, v in overrides.items()
                                                           if k.startswith("harness.")}}
        validate(options_cls, merged, prefix=f"{where}.harness")
    return overrides


def arm_configs(config: TrainConfig, manager: Any = None) -> list[tuple[ArmSpec, TrainConfig]]:
    """Each arm's full train config: the base with the arm's overrides and no ``arms``; all checked up front."""
    out = []
    for i, arm in enumerate(config.arms):
        overrides = {**arm_overrides(config, i, arm, manager), "arms": []}
        out.append((arm, with_overrides(config, overrides, source=f"arms[{i}] ({arm.label})")))
    return out


def describe_arm(arm: ArmSpec, config: TrainConfig) -> dict[str, Any]:
    """What distinguishes the arm, for the table: loss, aggregation, nudge (as the arm's config has them)."""
    nudge: Any = "-"
    if arm.nudge is not None:
        nudge = "on" if arm.nudge else "off"
    return {"loss": config.loss.name, "aggregation": config.loss.aggregation or "(loss default)", "nudge": nudge,
            "harness": {k: v for k, v in arm.harness.items()}}


class EvalRow(BaseModel):
    """One evaluated (model, harness row) cell: the matrix's statistics over ``passes`` passes."""

    model: str
    """The arm's label, ``base`` for the untrained model, or the run's name."""
    harness: str
    passes: int
    n_trials: int
    n_counted: int
    pass_at_1: float | None
    pass_at_1_std: float | None
    """Sample std of the per-pass pass@1 across passes."""
    mean_reward: float | None
    reward_std: float | None
    turns: float | None = None
    assistant_tokens_per_turn: float | None = None
    tool_call_success_rate: float | None = None
    non_model_error_rate: float | None = None
    matrix_dir: str | None = None
