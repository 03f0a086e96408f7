"""``[[harnesses]]`` of a train config: one run whose batches draw episodes from several harnesses.

```toml
[[harnesses]]                 # instead of [harness]; each row as [harness] is: a name and its options
name = "archipelago"
tool_choice = "required"      # flat beside the name, or in an `options = { … }` table
[[harnesses]]
name = "terminus"
label = "terminus"            # default: the name; what the run reports it as (reward/<label>); unique
weight = 2                    # default 1: copies of each task's row under this harness per epoch
options = { max_turns = 4 }
```

**The semantics.** The prompt dataset is tasks × harnesses: every task appears under every harness of the mix, as
its own prompt row, ``weight`` times (each copy its own row, so ``weight = 2`` gives a harness twice the rows of a
weight-1 harness in every epoch). A row carries its harness's label; the generator runs it under that harness.
``[train] mini_batch_size`` counts rows, i.e. (task, harness) groups, drawn in the shuffled order (a batch is
not balanced across harnesses). A GRPO group is one row's ``samples_per_prompt`` episodes: one task under one
harness, so advantages compare episodes of the same harness only.

The models are plain pydantic (no plugin imports); :func:`tackroom_train.plan.resolve_plan` checks every harness's
name and options against the installed plugins before anything starts.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from tackroom_app import FieldError, PluginSelection
from tackroom_train.config_arms import LABEL

RESERVED_LABELS = frozenset({"mean"})
"""Labels a harness cannot take: ``reward/mean`` is the step's mean reward beside each ``reward/<label>``."""


class MixedHarness(PluginSelection):
    """One ``[[harnesses]]`` row: a harness by ``name`` with its options (flat or in ``options``), as ``[harness]``
    takes them, plus the row's ``label`` and ``weight`` (neither is passed to the harness)."""

    label: str | None = None
    """What the run calls this row (``reward/<label>``, the trials' harness label); default: the name. A plain
    name: letters, digits, ``.``, ``_``, ``-``."""
    weight: int = Field(default=1, ge=1, strict=True)
    """Copies of each task's row under this harness in the prompt dataset (an epoch); the harness's share of the
    rows is its weight over the weights' sum."""

    @model_validator(mode="after")
    def _plain_label(self) -> MixedHarness:
        label = self.row_label
        if not LABEL.match(label):
            raise ValueError(f"label {label!r} must be a plain name: letters, digits, '.', '_', '-' (up to 64, "
                             "starting with a letter or digit)")
        if label in RESERVED_LABELS:
            raise ValueError(f"label {label!r} is reserved (reward/{label} is the step's mean reward); pick another")
        return self

    @property
    def row_label(self) -> str:
        """The label in effect: ``label``, else the harness's name."""
        return self.label or self.name

    def selection(self) -> PluginSelection:
        """The harness as ``[harness]`` would select it: its name and options, without label and weight."""
        return PluginSelection(name=self.name, **self.options)


def unique_harness_labels(harnesses: list[MixedHarness]) -> None:
    """Refuse two rows with one label (the default label is the name: a harness twice needs labels)."""
    seen: dict[str, int] = {}
    for i, row in enumerate(harnesses):
        label = row.row_label
        if label in seen:
            raise FieldError(f"harnesses[{i}].label", f"{label!r} is already harnesses[{seen[label]}]'s label; give "
                             "each row its own label (the label defaults to the harness's name)")
        seen[label] = i


def refuse_both(data: Any) -> Any:
    """A config's raw data with ``[harness]`` and a non-empty ``[[harnesses]]`` refused: one or the other."""
    if isinstance(data, dict) and data.get("harnesses") and "harness" in data:
        raise ValueError("[harness] and [[harnesses]] are both set: train on one harness ([harness]) or on a mix "
                         "([[harnesses]], each row a name and its options); keep one")
    return data
