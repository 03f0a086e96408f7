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
names change (:func:`arm_configs`). The sections' models are in :mod:`tackroom_train.config_arms` (plain
pydantic, no plugin imports); :func:`arm_configs` resolves loss and harness names with the plugin manager.
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel

from tackroom import ConfigError
from tackroom_app import with_overrides
from tackroom_train.config import TrainConfig
from tackroom_train.config_arms import ArmSpec, EvalHarness, EvalSection, LossOverride, unique_labels
from tackroom_train.plan import resolve_loss

__all__ = ["ArmSpec", "EvalHarness", "EvalRow", "EvalSection", "LossOverride", "arm_configs", "arm_overrides",
           "describe_arm", "nudge_field", "unique_labels"]


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
    from tackroom_app import PluginNotFoundError, get_plugin_manager, validate

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
    if (arm.harness or arm.nudge is not None) and config.harnesses:
        raise ConfigError(f"{where}: harness and nudge change the one [harness]; this config trains on a mix "
                          "([[harnesses]]), which an arm cannot change: give each variant of the mix its own config")
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
    """Each arm's full train config: the base with the arm's overrides and no ``arms``; all checked up front (the
    arm's ``[loss]`` resolved as its training will resolve it)."""
    out = []
    for i, arm in enumerate(config.arms):
        where = f"arms[{i}] ({arm.label})"
        overrides = {**arm_overrides(config, i, arm, manager), "arms": []}
        arm_config = with_overrides(config, overrides, source=where)
        try:
            resolve_loss(arm_config.loss, manager)
        except ConfigError as exc:
            raise type(exc)(f"{where}: {exc}") from None
        out.append((arm, arm_config))
    return out


def describe_arm(arm: ArmSpec, config: TrainConfig, manager: Any = None) -> dict[str, Any]:
    """What distinguishes the arm, for the table: loss, the aggregation in effect (the plan's rule:
    :mod:`tackroom_train.plan`), nudge, as the arm's config has them."""
    nudge: Any = "-"
    if arm.nudge is not None:
        nudge = "on" if arm.nudge else "off"
    loss = resolve_loss(config.loss, manager)
    return {"loss": loss.name, "aggregation": loss.aggregation, "nudge": nudge,
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
