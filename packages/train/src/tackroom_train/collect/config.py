"""``tackroom collect`` config: a ``tackroom run`` config (tasks, ``[harness]``, ``[sandbox]``, ``[verifier]``,
``[policy]`` = the teacher, ``[runtime]``) plus a ``[collect]`` table.

```toml
tasks = ["../worlds/lookup/train-framed/tasks"]

[harness]
name = "answer"

[policy]                      # the teacher: any OpenAI-compatible endpoint
base_url = "http://127.0.0.1:8011/v1"
tokenizer = "smollm2"         # the teacher's tokenizer (what the gateway renders with)

[collect]
tokenizer = "smollm2"         # the policy's tokenizer: the dataset's ids are in it
out = "data/lookup.jsonl"     # or .parquet
min_reward = 1.0
passes = 2                    # trials per task and harness
# teacher_script = "lookup_teacher.py:reply"   # serve a scripted teacher instead of [policy] base_url
# [[collect.harnesses]]       # several harnesses instead of [harness]
# name = "terminus"
# options = { max_turns = 4 }
```
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tackroom import ConfigError
from tackroom_app import (
    FieldError,
    PluginSelection,
    RunConfig,
    read_toml,
    register_secrets_in,
    resolve_runtime,
    validate,
    with_overrides,
)
from tackroom_train.demonstrations import DATASET_SUFFIXES


class HarnessRow(BaseModel):
    """``[[collect.harnesses]]``: a harness name, its options and a label (the same harness twice: two labels)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    label: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _remember_secrets(self) -> HarnessRow:
        register_secrets_in(self.options)
        return self

    @property
    def row_label(self) -> str:
        return self.label or self.name

    def selection(self) -> PluginSelection:
        return PluginSelection.model_validate({"name": self.name, "options": self.options})


class CollectSection(BaseModel):
    """``[collect]``: what to keep and where to write it."""

    model_config = ConfigDict(extra="forbid")

    tokenizer: str | None = None
    """The policy's tokenizer (``smollm2``, ``qwen3`` or a local folder): the dataset's ids are in it. Required."""
    out: str = "demonstrations.jsonl"
    """The dataset file (``.jsonl`` or ``.parquet``); its folder must exist. The summary goes beside it."""
    min_reward: float = 1.0
    """A trial is kept when its reward is at least this (and it ended without an error)."""
    passes: int = Field(default=1, ge=1, le=1000, strict=True)
    """Trials per task and harness (a sampling teacher gives different episodes)."""
    split: str = "train"
    """The ``split`` every demonstration carries."""
    teacher_script: str | None = None
    """``module:function`` or ``path/to/file.py:function``: serve this scripted teacher
    (:mod:`tackroom_train.collect.teacher`) for the run instead of calling ``[policy] base_url``."""
    harnesses: list[HarnessRow] = Field(default_factory=list)
    """Several harnesses, each a row of the summary; empty: the run config's ``[harness]``."""

    @field_validator("min_reward")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {value!r}")
        return value

    @field_validator("out")
    @classmethod
    def _dataset_file(cls, value: str) -> str:
        if Path(value).suffix not in DATASET_SUFFIXES:
            raise ValueError(f"{value!r}: the dataset is a {' or '.join(DATASET_SUFFIXES)} file")
        return value

    @model_validator(mode="after")
    def _unique_labels(self) -> CollectSection:
        seen: dict[str, int] = {}
        for i, row in enumerate(self.harnesses):
            if row.row_label in seen:
                raise FieldError(f"collect.harnesses[{i}].label", f"label {row.row_label!r} is already used by "
                                 f"harnesses[{seen[row.row_label]}]; give each row of the same harness its own label")
            seen[row.row_label] = i
        return self


class CollectConfig(RunConfig):
    """A ``tackroom collect`` config (see the module docstring)."""

    collect: CollectSection = Field(default_factory=CollectSection)

    def harness_rows(self) -> list[HarnessRow]:
        """``[[collect.harnesses]]``, or the one ``[harness]`` as a row."""
        if self.collect.harnesses:
            return list(self.collect.harnesses)
        return [HarnessRow(name=self.harness.name, options=self.harness.options)]


COLLECT_FLAGS = {
    "collect.tokenizer": "--tokenizer", "collect.out": "--out", "collect.min_reward": "--min-reward",
    "collect.passes": "--passes", "collect.teacher_script": "--teacher-script", "tasks": "--tasks",
    "harness": "--harness", "sandbox": "--sandbox", "verifier": "--verifier", "policy.base_url": "--base-url",
    "policy.model": "--model", "policy.tokenizer": "--teacher-tokenizer", "runtime.out": "--runs",
    "runtime.run_id": "--run-id", "runtime.concurrency": "--concurrency", "include": "--include",
    "exclude": "--exclude",
}
"""The flag that sets each dotted path, for error messages."""


def parse_collect_config(data: dict[str, Any], *, source: str = "collect config",
                         base_dir: Path | None = None) -> CollectConfig:
    """Validate a collect config mapping (a wrong key is named with the valid ones); relative task paths and a
    relative ``teacher_script`` file resolve against ``base_dir``."""
    config = validate(CollectConfig, data, source=source)
    if base_dir is not None:
        config.tasks = [str((base_dir / t).resolve()) if not Path(t).is_absolute() else t for t in config.tasks]
        script = config.collect.teacher_script
        if script and ":" in script and script.rsplit(":", 1)[0].endswith(".py"):
            file, function = script.rsplit(":", 1)
            if not Path(file).is_absolute():
                config.collect.teacher_script = f"{(base_dir / file).resolve()}:{function}"
    resolve_runtime(config.runtime, source=source)
    return config


def load_collect_config(path: str | Path) -> CollectConfig:
    """Read and validate a collect config file."""
    p = Path(path)
    return parse_collect_config(read_toml(p), source=str(p), base_dir=p.parent)


def apply_flags(config: CollectConfig, overrides: dict[str, Any], *, source: str) -> CollectConfig:
    """``config`` with the command line's values (dotted paths) applied and validated like the file's."""
    config = with_overrides(config, overrides, source=source, flags=COLLECT_FLAGS)
    resolve_runtime(config.runtime, source=source, flags=COLLECT_FLAGS)
    return config


def check_ready(config: CollectConfig) -> None:
    """What must hold before anything runs: a policy tokenizer, a teacher, tasks, an output folder that exists."""
    if not config.collect.tokenizer:
        raise ConfigError("collect.tokenizer: name the policy's tokenizer (--tokenizer smollm2|qwen3|PATH): the "
                          "demonstrations' token ids are in it")
    if not config.collect.teacher_script and not config.policy.configured:
        raise ConfigError("no teacher: set [policy] base_url (--base-url, an OpenAI-compatible endpoint) or "
                          "collect.teacher_script (--teacher-script module:function)")
    if not config.tasks:
        raise ConfigError("no tasks given: set `tasks` in the config or pass --tasks DIR")
    out = Path(config.collect.out)
    if not out.parent.is_dir():
        raise ConfigError(f"collect.out: {out}: the folder {out.parent} does not exist; create it "
                          f"(mkdir -p {out.parent}) or write the dataset elsewhere")
    if out.suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ConfigError(f"collect.out: {out}: writing Parquet needs pyarrow (pip install pyarrow), "
                              "or write .jsonl") from None
