"""``[[arms]]`` and ``[eval]`` of a train config: their models (plain pydantic, no plugin imports). What an arm
does to the base config is :mod:`tackroom_train.arms`."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tackroom_app import TaskSelection

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

    Default harness: the training ``[harness]`` with its options (every harness of a ``[[harnesses]]`` mix).
    Tasks, sandbox and verifier default to the training ones."""

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
