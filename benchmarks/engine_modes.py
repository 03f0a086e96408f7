"""The local engine's start from a cold compile cache, and its decode throughput, per compilation mode, side by side.

    uv run python benchmarks/engine_modes.py                          # compiled (vLLM's default) vs eager (--eager: -O0)
    uv run python benchmarks/engine_modes.py --concurrency 6 --concurrency 12 --max-tokens 128

Each mode starts `tackroom model up`'s engine (the venv and the converted model must exist: `tackroom model up` once)
on a free port with empty compile caches (TorchInductor's and vLLM's, in a temporary folder), so the start is what
a fresh machine's is, and times the start to /health (one engine after the other). With every engine up, it sends
rounds of `--concurrency` chat requests that each decode exactly `--max-tokens` tokens (ignore_eos), alternating
between the engines round by round, and reports the best round's decoded tokens per second. Run it on a quiet
machine (stop other engines: each holds its KV cache, 2 GiB).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import httpx

MODES = {"compiled": False, "eager": True}
"""Each mode: whether the engine starts ``eager`` (``tackroom model up --eager``)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def decode_round(base_url: str, model: str, concurrency: int, max_tokens: int) -> float:
    """Tokens per second over one round of ``concurrency`` requests of ``max_tokens`` each."""
    body = {"model": model, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "messages": [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]}
    async with httpx.AsyncClient(timeout=600) as client:
        t0 = time.monotonic()
        answers = await asyncio.gather(*(client.post(f"{base_url}/chat/completions", json=body)
                                         for _ in range(concurrency)))
        elapsed = time.monotonic() - t0
    tokens = sum(a.raise_for_status().json()["usage"]["completion_tokens"] for a in answers)
    return tokens / elapsed


def start(mode: str, caches: Path) -> tuple[object, float]:
    """The engine of ``mode`` on a free port with empty compile caches under ``caches``; (its state, start seconds)."""
    from tackroom_engine import engine, process

    own_env = process.engine_env
    process.engine_env = lambda s: {**own_env(s), "TORCHINDUCTOR_CACHE_DIR": str(caches / "torchinductor")}
    os.environ["VLLM_CACHE_ROOT"] = str(caches / "vllm")
    try:
        t0 = time.monotonic()
        state = engine.up(engine.EngineSettings(port=free_port(), eager=MODES[mode]), log=lambda m: None)
        return state, time.monotonic() - t0
    finally:
        process.engine_env = own_env


def measure(modes: list[str], concurrencies: list[int], max_tokens: int, rounds: int) -> dict[str, dict[str, float]]:
    """Each mode's start (one after the other, nothing else running), then rounds alternating between the engines,
    all up at once, so that both see the same machine; the best round of each is kept."""
    from tackroom_engine import engine

    with tempfile.TemporaryDirectory(prefix="engine-modes-") as tmp:
        states, rows = {}, {}
        try:
            for mode in modes:
                print(f"{mode}: starting{' (--eager)' if MODES[mode] else ''}", file=sys.stderr, flush=True)
                states[mode], took = start(mode, Path(tmp) / mode)
                rows[mode] = {"start_s": took}
                asyncio.run(decode_round(states[mode].base_url, states[mode].model, 1, 8))  # its first request's warm-up
            for c in concurrencies:
                for r in range(rounds):
                    for mode in (modes if r % 2 == 0 else modes[::-1]):
                        rate = asyncio.run(decode_round(states[mode].base_url, states[mode].model, c, max_tokens))
                        rows[mode][f"tok/s @{c}"] = max(rate, rows[mode].get(f"tok/s @{c}", 0.0))
            return rows
        finally:
            for state in states.values():
                engine.down(state.port)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", action="append", choices=sorted(MODES), help="default: every mode")
    ap.add_argument("--concurrency", action="append", type=int, help="requests at once (default: 1, 6, 12)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=4, help="rounds per concurrency and mode, alternating; the best is kept")
    args = ap.parse_args()
    modes, concurrencies = args.mode or list(MODES), args.concurrency or [1, 6, 12]
    rows = measure(modes, concurrencies, args.max_tokens, args.rounds)
    columns = list(next(iter(rows.values())))
    print("| mode | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for mode, row in rows.items():
        print(f"| {mode} | " + " | ".join(f"{row[c]:.1f}" for c in columns) + " |")
    if len(rows) > 1:
        base = rows[modes[0]]
        for mode in modes[1:]:
            print(f"{mode} ÷ {modes[0]}: " + ", ".join(f"{c} {rows[mode][c] / base[c]:.2f}×" for c in columns))


if __name__ == "__main__":
    main()
