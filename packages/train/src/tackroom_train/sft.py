"""``[sft]`` resolved once (:func:`resolve_sft`): the demonstrations read, checked and cut, ready for either backend.

What is checked before anything starts, each a :class:`~tackroom.ConfigError` that says what to do:

- the file exists and every row is a demonstration (:func:`~tackroom_train.demonstrations.read_demonstrations`);
- the rows were made for this run's tokenizer: a row's ``tokenizer`` is ``[model] tokenizer`` (default
  ``[model] path``) by name, or a local tokenizer folder with the same ``tokenizer.json``; otherwise the ids are
  another vocabulary's and the error names both;
- something is left to train: rows with ``split = "train"`` (any split but ``eval``) that keep a trained token.

``max_length`` truncates: a longer row keeps its first ``max_length`` tokens; a row whose trained tokens all lie
beyond is dropped. Only tokens from the second on can be trained (a token is predicted from those before it), so a
row's trained tokens are its ``loss_mask`` 1s after its first token.

Which rows form a step (:func:`epoch_batches`): each epoch shuffles the training rows with ``[train] seed`` + the
epoch, then cuts them into ``batch_size`` demonstrations a step, the last step taking the rest (SkyRL's SFT
dataloader does the same, ``drop_last = False``).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from tackroom import ConfigError
from tackroom_train.config_sft import SftSection
from tackroom_train.demonstrations import read_demonstrations

EVAL_SPLIT = "eval"
"""Rows with this ``split`` are held out (measured before and after, never trained)."""


@dataclass(frozen=True)
class Example:
    """One demonstration as the warm start trains it: its ids and mask (truncated), and where it came from."""

    ids: list[int]
    mask: list[int]
    task_id: str

    @property
    def trained_tokens(self) -> int:
        """Tokens the loss covers: mask 1 after the first token (the first is never predicted)."""
        return sum(self.mask[1:])


class SftPlan(BaseModel):
    """``[sft]`` resolved: its settings, the training and held-out rows, and what truncation did."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    settings: SftSection
    dataset: Path
    tokenizer: str
    """The run's tokenizer the rows were checked against (``[model] tokenizer``, else ``[model] path``)."""
    train: list[Example]
    """Never empty."""
    held_out: list[Example]
    """The ``split = "eval"`` rows (may be empty)."""
    truncated: int = 0
    """Rows cut to ``max_length`` (kept)."""
    dropped: int = 0
    """Rows with no trained token left (after truncation, or a mask on the first token only)."""

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(len(self.train) / self.settings.batch_size)

    @property
    def steps_total(self) -> int:
        return self.settings.epochs * self.steps_per_epoch

    @property
    def then_rl(self) -> bool:
        return self.settings.then_rl

    def describe(self) -> str:
        s = self.settings
        cut = f", {self.truncated} cut to {s.max_length} tokens" if self.truncated else ""
        gone = f", {self.dropped} dropped (no trained token left)" if self.dropped else ""
        held = f", {len(self.held_out)} held out" if self.held_out else ""
        then = "then RL" if s.then_rl else "then stop (warm start only)"
        return (f"sft: {len(self.train)} demonstrations{held}{cut}{gone} from {self.dataset}; {s.epochs} epoch(s) × "
                f"{self.steps_per_epoch} steps of {s.batch_size}, lr {s.learning_rate:g}, token-mean cross-entropy; "
                f"{then}")


def resolve_sft(settings: SftSection, *, tokenizer: str) -> SftPlan:
    """Read ``settings.dataset`` once: the rows checked against ``tokenizer`` (the run's), cut to ``max_length``
    and split into training and held-out rows; see the module docstring for what is refused."""
    path = Path(settings.dataset)
    if not path.is_file():
        raise ConfigError(f"sft.dataset: no such file: {path} (a demonstrations file as `tackroom collect` writes "
                          "it, .jsonl or .parquet; a relative path resolves against the config file's folder)")
    train: list[Example] = []
    held_out: list[Example] = []
    truncated = dropped = rows = 0
    foreign: dict[str, int] = {}
    wanted, seen = set(settings.harnesses), set()
    for row in read_demonstrations(path):
        seen.add(row.harness)
        if wanted and row.harness not in wanted:
            continue
        rows += 1
        if row.tokenizer != tokenizer:
            foreign[row.tokenizer] = foreign.get(row.tokenizer, 0) + 1
        ids, mask, cut = row.input_ids, row.loss_mask, False
        if settings.max_length is not None and len(ids) > settings.max_length:
            ids, mask, cut = ids[:settings.max_length], mask[:settings.max_length], True
        example = Example(list(ids), list(mask), row.task_id)
        if not example.trained_tokens:
            dropped += 1
            continue
        truncated += cut
        (held_out if row.split == EVAL_SPLIT else train).append(example)
    if missing := sorted(wanted - seen):
        raise ConfigError(f"sft.harnesses: no row of {path} was collected under {', '.join(map(repr, missing))}; "
                          f"its rows' harnesses: {', '.join(sorted(seen)) or 'none'}")
    for name, count in foreign.items():
        check_tokenizer(name, tokenizer, rows=count, path=path)
    if not train:
        why = (f"{rows} row(s), {len(held_out)} held out (split = \"eval\"), {dropped} without a trained token"
               + (f" after max_length = {settings.max_length}" if settings.max_length else "")) if rows else "no rows"
        raise ConfigError(f"sft.dataset: {path}: nothing to train on ({why}); collect demonstrations with "
                          "`tackroom collect`, or raise [sft] max_length")
    return SftPlan(settings=settings, dataset=path, tokenizer=tokenizer, train=train, held_out=held_out,
                   truncated=truncated, dropped=dropped)


def check_tokenizer(theirs: str, ours: str, *, rows: int, path: Path) -> None:
    """Accept rows made with tokenizer ``theirs`` for a run on ``ours`` when both name the same local tokenizer
    (the same folder, or folders with the same ``tokenizer.json``); else a :class:`ConfigError` naming both."""
    mine, other = _tokenizer_file(ours), _tokenizer_file(theirs)
    if mine is not None and other is not None and (mine == other or mine.read_bytes() == other.read_bytes()):
        return
    raise ConfigError(f"sft.dataset: {path}: {rows} demonstration(s) were tokenized with {theirs!r}, this run's "
                      f"tokenizer is {ours!r} ([model] tokenizer, else [model] path): their ids are another "
                      "vocabulary's. Collect demonstrations for this policy (`tackroom collect` with the same "
                      "[model]), or train the model they were made for")


def _tokenizer_file(name: str) -> Path | None:
    """``tokenizer.json`` of the local tokenizer ``name`` names (``smollm2``, ``qwen3``, a folder); None: none."""
    from tackroom_gateway.tokenizers import tokenizer_dir

    try:
        path = tokenizer_dir(name) / "tokenizer.json"
    except (ConfigError, OSError):
        return None
    return path.resolve() if path.is_file() else None


def epoch_batches(plan: SftPlan, epoch: int, seed: int) -> list[list[Example]]:
    """The steps of ``epoch`` (0-based): the training rows shuffled with ``seed + epoch``, ``batch_size`` a step."""
    order = list(range(len(plan.train)))
    random.Random(seed + epoch).shuffle(order)
    size = plan.settings.batch_size
    return [[plan.train[i] for i in order[k:k + size]] for k in range(0, len(order), size)]


def write_pretokenized(examples: list[Example], path: Path) -> Path:
    """``examples`` as SkyRL's pretokenized SFT rows (``input_ids``, ``loss_mask``; JSONL), the first token's mask
    0 as the tinker backend trains it. Written beside and renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.writing")
    with tmp.open("w", encoding="utf-8") as fh:
        for ex in examples:
            row: dict[str, Any] = {"input_ids": ex.ids, "loss_mask": [0, *ex.mask[1:]]}
            fh.write(json.dumps(row) + "\n")
    tmp.replace(path)
    return path
