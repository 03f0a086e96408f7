"""Token ids as the text the model saw: decoded with the run's tokenizer, where tackroom-gateway can load it.

The tokenizer is the one the run named (``run.json``'s ``policy.tokenizer``; a matrix's model column's
``tokenizer``), loaded from local files only (the gateway's ``load_tokenizer``). Without the gateway installed,
or with a tokenizer that is not on this machine, the page shows the ids alone and says why.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tackroom_viewer.run_folders import RunFolder, read_json_object


@dataclass
class Decoder:
    name: str | None
    tokenizer: Any = None
    problem: str | None = None

    def text(self, ids: list[Any]) -> str | None:
        """The ids as text, special tokens included (the chat template's markers are what the model saw)."""
        if self.tokenizer is None or not all(isinstance(i, int) for i in ids):
            return None
        try:
            return self.tokenizer.decode(ids, skip_special_tokens=False)
        except Exception:  # an id outside the vocabulary: the ids alone are shown
            return None

    def pieces(self, ids: list[Any]) -> list[str | None]:
        """Each id's own text (for the hover title of a token)."""
        if self.tokenizer is None:
            return [None] * len(ids)
        return [self.text([i]) for i in ids]


def _load_now(name: str) -> tuple[Any, str | None]:
    try:
        from tackroom_gateway import load_tokenizer
    except ImportError:
        return None, "token ids are shown undecoded: tackroom-gateway (which loads tokenizers) is not installed"
    try:
        return load_tokenizer(name), None
    except Exception as exc:  # not on this machine, or not a tokenizer: say so and show the ids
        return None, f"token ids are shown undecoded: tokenizer {name!r} could not be loaded here ({exc})"[:400]


class Tokenizers:
    """Tokenizers loaded in the background, once each: loading one (transformers' import included) takes seconds
    to tens of seconds on a busy machine, and no page waits for it."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="tokenizers")
        self._loading: dict[str, Future[tuple[Any, str | None]]] = {}
        self._lock = threading.Lock()

    def start(self, name: str) -> Future[tuple[Any, str | None]]:
        with self._lock:
            if name not in self._loading:
                self._loading[name] = self._pool.submit(_load_now, name)
            return self._loading[name]

    def get(self, name: str, wait_s: float = 0.5) -> tuple[Any, str | None]:
        future = self.start(name)
        try:
            return future.result(timeout=wait_s)
        except TimeoutError:
            return None, f"token ids are shown undecoded while tokenizer {name!r} loads: reload in a few seconds"


def tokenizer_name(run: RunFolder | None, result: dict[str, Any] | None) -> str | None:
    """The tokenizer the trial's run named for its model, if any."""
    if run is None:
        return None
    record = read_json_object(run.path / "run.json") or {}
    policy = record.get("policy") if isinstance(record.get("policy"), dict) else {}
    if isinstance(policy.get("tokenizer"), str):
        return policy["tokenizer"]
    matrix = (read_json_object(run.path / "matrix.config.json") or {}).get("config") or {}
    model = (result or {}).get("model")
    for column in matrix.get("models") or [] if isinstance(matrix, dict) else []:
        if isinstance(column, dict) and column.get("label") == model and isinstance(column.get("tokenizer"), str):
            return column["tokenizer"]
    return None


def decoder_for(tokenizers: Tokenizers, run: RunFolder | None, result: dict[str, Any] | None) -> Decoder:
    name = tokenizer_name(run, result)
    if name is None:
        return Decoder(None, problem="token ids are shown undecoded: the run names no tokenizer")
    tokenizer, problem = tokenizers.get(name)
    return Decoder(name, tokenizer, problem)
