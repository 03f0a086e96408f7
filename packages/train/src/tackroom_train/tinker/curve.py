"""The reward curve of a run: ``reward_curve.csv`` and ``reward_curve.png`` in the run directory."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

COLUMNS = ("step", "mean_reward", "trained_trials", "masked_trials", "mismatch_mean", "mismatch_max", "loss",
           "rollout_s", "train_s", "version", "staleness", "handoff_s", "mismatch_flagged", "dropped_batches",
           "sent_rows", "turns_per_episode", "tool_calls_per_episode", "tool_call_success", "no_signal_groups",
           "resampled_groups")


def write_csv(steps: list[dict[str, Any]], path: str | Path) -> Path:
    """One row per step: the fixed columns, then the ``reward/…`` columns in name order (in a mix each harness's
    ``reward/<label>`` just before its ``reward/<label>/<task>`` columns)."""
    p = Path(path)
    tasks = sorted({k for s in steps for k in s if k.startswith("reward/")})
    with p.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*COLUMNS, *tasks], extrasaction="ignore")
        writer.writeheader()
        for s in steps:
            writer.writerow({k: (round(v, 6) if isinstance(v, float) else v) for k, v in s.items()})
    return p


def write_png(steps: list[dict[str, Any]], path: str | Path, *, title: str = "tackroom train",
              harnesses: list[str] | None = None) -> Path:
    """Mean reward per step (bold) and each task's (with ``harnesses``, a mix's labels: each harness's instead),
    with the logprob mismatch on a second axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = Path(path)
    xs = [s["step"] for s in steps]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    keys = ([f"reward/{label}" for label in harnesses] if harnesses
            else sorted({k for s in steps for k in s if k.startswith("reward/")}))
    for key in keys:
        ax.plot(xs, [s.get(key) for s in steps], lw=1.5 if harnesses else 1, alpha=0.8 if harnesses else 0.6,
                marker="." if harnesses else None, label=key.removeprefix("reward/"))
    ax.plot(xs, [s["mean_reward"] for s in steps], lw=2.5, color="black", marker="o", label="mean")
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    if any(s.get("mismatch_mean") is not None for s in steps):
        ax2 = ax.twinx()
        ax2.plot(xs, [s.get("mismatch_mean") for s in steps], ls="--", color="tab:red", lw=1, label="|trainer-rollout| logprob")
        ax2.set_ylabel("mean |Δ logprob|", color="tab:red")
        ax2.legend(loc="lower right", fontsize=7)
    ax.legend(loc="upper left", fontsize=7)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(p)
    plt.close(fig)
    return p


def render_table(steps: list[dict[str, Any]], *, harnesses: list[str] | None = None) -> str:
    """The curve as text, for the terminal; with ``harnesses`` (a mix's labels) each harness's mean reward as a
    column at the end (``-``: none of its rows in that step)."""
    labels = harnesses or []
    lines = ["step  mean_reward  mismatch   loss      trained/masked  version/stale  rollout_s  train_s  handoff_s"
             + "".join(f"  {label:>{max(len(label), 5)}}" for label in labels)]
    for s in steps:
        mm = s.get("mismatch_mean")
        loss = s.get("loss")
        version = f"{s['version']}/{s['staleness']}" if s.get("version") is not None else "-"
        secs = {k: "-" if s.get(k) is None else f"{s[k]:.1f}" for k in ("rollout_s", "train_s", "handoff_s")}
        lines.append(f"{s['step']:>4}  {s['mean_reward']:>11.3f}  {'-' if mm is None else f'{mm:.4f}':>8}   "
                     f"{'-' if loss is None else f'{loss:+.4f}':>8}  {s['trained_trials']}/{s['masked_trials']:<13}"
                     f"{version:>6}  {secs['rollout_s']:>14}  {secs['train_s']:>7}  {secs['handoff_s']:>9}"
                     + "".join(f"  {_reward(s.get(f'reward/{label}')):>{max(len(label), 5)}}" for label in labels))
    return "\n".join(lines)


def _reward(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
