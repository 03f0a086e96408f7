"""``[sft]`` of a train config: a supervised warm start on demonstrations before RL (a config model only; what
the section does is :mod:`tackroom_train.sft`, on the tinker backend :mod:`tackroom_train.tinker.sft`, on SkyRL's
:mod:`tackroom_train.skyrl_sft`).

```toml
[sft]
dataset = "../../runs/collect/blue/demonstrations.jsonl"   # what `tackroom collect` writes (JSONL or Parquet)
epochs = 3
learning_rate = 1e-4
batch_size = 8          # demonstrations (sequences) per optimiser step
max_length = 2048       # longer demonstrations are cut to their first 2048 tokens
then_rl = true          # false: train only the warm start, write <run>/policy, stop
```
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class SftSection(BaseModel):
    """``[sft]``: supervised fine-tuning on demonstrations (:mod:`tackroom_train.demonstrations`) before RL.

    The loss is the cross-entropy of the demonstrations' trained tokens (``loss_mask`` 1: the assistant's own
    tokens; prompts, tool results and what a harness wrote are masked exactly as in RL), reduced as the mean over
    every trained token of the step's batch (``token_mean``: a long demonstration weighs by its tokens, as in SkyRL's
    own SFT trainer)."""

    model_config = ConfigDict(extra="forbid")

    dataset: str
    """A demonstrations file: JSONL (``.jsonl``) or Parquet (``.parquet``); a relative path resolves against the
    config file's folder, as ``tasks`` do. Rows with ``split = "eval"`` are held out: their mean NLL per token is
    measured before and after the warm start, never trained on."""
    epochs: int = Field(default=1, ge=1)
    """Passes over the training rows, each in a fresh order (``[train] seed`` + the epoch)."""
    learning_rate: float = Field(default=1e-4, gt=0)
    """Adam's learning rate for the warm start (the LoRA's on the tinker backend; SkyRL fine-tunes the whole model,
    where 1e-5 is the usual order). RL's own rate stays ``[tinker]``/``[train] learning_rate``."""
    batch_size: int = Field(default=8, ge=1)
    """Demonstrations (sequences, not tokens) per optimiser step, as SkyRL's SFT ``batch_size``; an epoch is
    ceil(rows / batch_size) steps, its last one smaller when the rows do not divide evenly."""
    max_length: int | None = Field(default=None, ge=2)
    """Truncate: a longer demonstration keeps its first ``max_length`` tokens (its prompt and earliest turns, as
    SkyRL's SFT truncates), and one whose trained tokens all lie beyond is dropped; the run says how many of each.
    None: no limit."""
    harnesses: list[str] = Field(default_factory=list)
    """Train only on the rows collected under these harnesses (a row's ``harness``: the name, or the label
    ``[[collect.harnesses]]`` gave it); empty: every row. A name no row has is refused, with the names there are."""
    then_rl: bool = True
    """True: RL continues from the warm weights in the same run. False: the run trains the warm start only, writes
    ``<run>/policy`` (the warm policy, servable) and stops; ``[model] init_from = "<run>"`` starts a later run
    there. An SFT-only run needs no ``tasks``."""
    skyrl: dict[str, Any] = Field(default_factory=dict)
    """Raw overrides of SkyRL's ``SFTConfig`` by dotted path (``micro_train_batch_size_per_gpu = 4``), applied last;
    the skyrl backend only."""
