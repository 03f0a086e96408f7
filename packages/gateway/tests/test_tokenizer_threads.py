"""Tokenizers load from many threads at once (one per concurrent trial) without import races."""

from __future__ import annotations

import subprocess
import sys

import pytest


# Slow by cost, not by need: three fresh interpreters (the race is in the *first* import of transformers), each
# importing transformers and, in this workspace where torch is installed, torch, each a heavy import.
@pytest.mark.slow
def test_first_tokenizer_loads_race_free_across_threads():
    # A fresh interpreter, so transformers is imported for the first time by eight threads at once.
    code = (
        "import concurrent.futures as f\n"
        "from tackroom_gateway.tokenizers import load_tokenizer\n"
        "with f.ThreadPoolExecutor(8) as pool:\n"
        "    toks = list(pool.map(lambda _: load_tokenizer('smollm2'), range(8)))\n"
        "print(len({t.vocab_size for t in toks}))\n"
    )
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip() == "1"
