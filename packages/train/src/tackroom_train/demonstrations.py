"""Demonstrations: the token-exact episodes `tackroom collect` keeps and the ``[sft]`` step trains on.

One :class:`Demonstration` is one branch of one kept trial's token session, flattened: ``input_ids`` is the whole
sequence in the *policy's* tokenizer, ``loss_mask`` is 1 on the assistant's own tokens and 0 on everything else
(the prompt, tool results, text an agent or harness wrote), exactly the mask RL trains under. A dataset is a JSONL
file of them (one per line) or a Parquet file with the same columns.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tackroom import ConfigError


class Demonstration(BaseModel):
    """One flattened, loss-masked token sequence of a kept trial."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    harness: str
    reward: float
    input_ids: list[int]
    loss_mask: list[int]
    tokenizer: str
    """The policy tokenizer the ids are in (a name or local path, as ``[model] tokenizer`` gives it)."""
    source: str = ""
    """Where it came from: the run folder and trial id."""
    branch: int = 0
    rerendered: bool = False
    """True when the teacher's tokens were not the policy's, so the messages were rendered through the policy's
    chat template instead of copied from the gateway's record."""
    split: str = Field(default="train")

    @model_validator(mode="after")
    def _aligned(self) -> Demonstration:
        if len(self.loss_mask) != len(self.input_ids):
            raise ValueError(f"loss_mask has {len(self.loss_mask)} entries for {len(self.input_ids)} input ids")
        if any(m not in (0, 1) for m in self.loss_mask):
            raise ValueError("loss_mask holds values other than 0 and 1")
        if not any(self.loss_mask):
            raise ValueError("loss_mask trains no token (no assistant tokens in the sequence)")
        return self

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask)


def write_jsonl(path: Path, rows: Iterable[Demonstration]) -> int:
    """Write ``rows`` to ``path`` (a temporary file renamed into place); returns how many."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.writing")
    n = 0
    with tmp.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(row.model_dump_json() + "\n")
            n += 1
    tmp.replace(path)
    return n


DATASET_SUFFIXES = (".jsonl", ".parquet")
"""The dataset formats, by file suffix."""


def write_parquet(path: Path, rows: Iterable[Demonstration]) -> int:
    """Write ``rows`` as a Parquet file with the JSONL rows' columns (a temporary file renamed into place)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ConfigError(f"{path}: writing Parquet needs pyarrow (pip install pyarrow), or write JSONL") from exc
    records = [row.model_dump(mode="json") for row in rows]
    schema = pa.schema([(name, _ARROW_TYPES[name](pa)) for name in Demonstration.model_fields])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.writing")
    pq.write_table(pa.Table.from_pylist(records, schema=schema), tmp)
    tmp.replace(path)
    return len(records)


_ARROW_TYPES = {
    "task_id": lambda pa: pa.string(), "harness": lambda pa: pa.string(), "reward": lambda pa: pa.float64(),
    "input_ids": lambda pa: pa.list_(pa.int64()), "loss_mask": lambda pa: pa.list_(pa.int8()),
    "tokenizer": lambda pa: pa.string(), "source": lambda pa: pa.string(), "branch": lambda pa: pa.int64(),
    "rerendered": lambda pa: pa.bool_(), "split": lambda pa: pa.string(),
}
"""One Arrow type per :class:`Demonstration` field: an empty dataset keeps its schema, ids stay integers."""


def write_dataset(path: Path, rows: Iterable[Demonstration]) -> int:
    """Write ``rows`` as JSONL or Parquet, by ``path``'s suffix (:data:`DATASET_SUFFIXES`); returns how many."""
    if path.suffix == ".parquet":
        return write_parquet(path, rows)
    if path.suffix == ".jsonl":
        return write_jsonl(path, rows)
    raise ConfigError(f"{path}: a dataset is a {' or '.join(DATASET_SUFFIXES)} file")


def read_demonstrations(path: Path) -> Iterator[Demonstration]:
    """Read a JSONL (``.jsonl``) or Parquet (``.parquet``) dataset; a bad row is a ConfigError naming its line."""
    if not path.is_file():
        raise ConfigError(f"demonstrations: no such file: {path}")
    if path.suffix == ".parquet":
        yield from _read_parquet(path)
        return
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield Demonstration.model_validate(json.loads(line))
            except (json.JSONDecodeError, ValidationError) as exc:
                raise ConfigError(f"{path}:{number}: not a demonstration: {exc}") from exc


def _read_parquet(path: Path) -> Iterator[Demonstration]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ConfigError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow), or write JSONL") from exc
    for number, record in enumerate(pq.read_table(path).to_pylist(), 1):
        try:
            yield Demonstration.model_validate(record)
        except ValidationError as exc:
            raise ConfigError(f"{path}: row {number}: not a demonstration: {exc}") from exc
