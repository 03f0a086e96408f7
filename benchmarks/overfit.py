#!/usr/bin/env python
"""The overfitting run (the Mercor/SkyRL guide's Step 3) on this CPU: does mean reward rise?

    uv run python benchmarks/overfit.py                    # examples/train/overfit.toml as it is
    uv run python benchmarks/overfit.py --steps 6 --lr 2e-3 --url http://127.0.0.1:8000

Runs ``tackroom train --backend tinker`` on ``examples/train/overfit.toml``
(SmolLM2-135M-Instruct with a LoRA, three one-word tasks, the ``answer``
harness through the policy gateway, SkyRL's Tinker API server on JAX) and
prints, side by side:

- the baseline: step 1's mean reward, sampled from the untrained weights;
- the trained policy: the mean of the last ``--window`` steps, and the ratio;
- the train/inference logprob mismatch per step (the guide's Step 2: mean
  |trainer − rollout| logprob over trained tokens; warn above 0.03);
- seconds per step (rollout, train).

The reward curve lands in the run directory as ``reward_curve.csv`` and
``reward_curve.png``. Needs `tackroom model up` to have converted SmolLM2
once (scripts/setup does), and uv (the Tinker server runs in its own uv
project, installed on first use).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import datetime
from pathlib import Path
from statistics import mean

from tackroom_train.config import load_train_config
from tackroom_train.tinker.loop import run_tinker

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "examples" / "train" / "overfit.toml"))
    parser.add_argument("--steps", type=int, help="override [train] max_training_steps")
    parser.add_argument("--lr", type=float, help="override the learning rate")
    parser.add_argument("--url", help="a running Tinker server (default: start one for the run)")
    parser.add_argument("--window", type=int, default=3, help="steps averaged at each end")
    parser.add_argument("--out", default=str(ROOT / "runs" / "bench-overfit"))
    args = parser.parse_args()

    config = load_train_config(args.config)
    config.backend = "tinker"
    if args.steps:
        config.train.max_training_steps = args.steps
    if args.lr:
        config.tinker.learning_rate = args.lr
    if args.url:
        config.tinker.url = args.url
    run_dir = Path(args.out) / datetime.now().strftime("%Y%m%d-%H%M%S")
    summary = asyncio.run(run_tinker(config, run_dir, log=print))
    steps = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    w = min(args.window, max(len(steps) // 2, 1))
    base, trained = mean(s["mean_reward"] for s in steps[:w]), mean(s["mean_reward"] for s in steps[-w:])
    mm = [s["mismatch_mean"] for s in steps if s["mismatch_mean"] is not None]
    print()
    print(f"{'':28}{'baseline':>12}{'trained':>12}{'ratio':>8}")
    print(f"{'mean reward (first/last ' + str(w) + ')':28}{base:>12.3f}{trained:>12.3f}"
          f"{(trained / base if base else float('inf')):>8.2f}")
    print(f"{'step 1 → best step':28}{steps[0]['mean_reward']:>12.3f}{summary.best_reward:>12.3f}")
    if mm:
        print(f"{'|trainer-rollout| logprob':28}{'mean ' + format(mean(mm), '.4f'):>12}{'max ' + format(max(mm), '.4f'):>12}"
              f"   warnings (> {config.train.logprob_mismatch_warn}): {summary.mismatch_warnings}")
    print(f"{'seconds per step':28}{'rollout ' + format(mean(s['rollout_s'] for s in steps), '.0f'):>12}"
          f"{'train ' + format(mean(s['train_s'] for s in steps), '.0f'):>12}")
    print(f"reward rose: {'yes' if trained > base else 'NO'}; curve: {summary.curve_csv}, {summary.curve_png}")


if __name__ == "__main__":
    main()
