"""What the side-by-side benchmarks share (world_ready.py, opencode_setup.py): a baseline from git, and the table of
each phase's median per variant with the baseline's ratio to ``bound``."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def baseline_tree(ref: str, packages: tuple[str, ...], into: Path) -> list[Path]:
    """``packages`` (folders of this repository) as git ref ``ref`` has them, extracted under ``into``."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, *packages], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return [into / p for p in packages]


def print_phase_table(medians: dict[str, dict[str, float]], phases: tuple[str, ...]) -> None:
    """One row a phase, one column a variant; with three variants (baseline, uploaded, bound) a last column holds
    baseline ÷ bound."""
    names = list(medians)
    print("| phase | " + " | ".join(names) + (" | baseline ÷ bound |" if len(names) == 3 else " |"))
    print("|---|" + "---:|" * (len(names) + (len(names) == 3)))
    for phase in phases:
        cells = [f"{medians[n][phase]:.3g}" for n in names]
        if len(names) == 3:
            base, bound = medians[names[0]][phase], medians["bound"][phase]
            cells.append(f"{base / bound:.1f}×" if bound > 0 and base > 0 else "—")
        print(f"| {phase} | " + " | ".join(cells) + " |")
