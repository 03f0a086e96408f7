"""What the side-by-side benchmarks share (world_ready.py, opencode_setup.py): a baseline from git, the table of
each phase's median per variant with the baseline's ratio to ``bound``, and a trial's sandbox started, timed and
its calls counted."""

from __future__ import annotations

import subprocess
import time
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


# -- inside a variant's process -----------------------------------------------------------------------
def sandbox_provider(sandbox: str):
    """The ``local`` or ``docker`` provider, as the benchmarks run them."""
    if sandbox == "docker":
        from tackroom_docker import DockerProvider

        return DockerProvider({"cli_timeout_sec": 300})
    from tackroom_local import LocalSandboxProvider

    return LocalSandboxProvider()


async def started_sandbox(provider, harness, task, name: str, bound: bool, timed: dict[str, float],
                          counts: dict[str, int]):
    """``task``'s sandbox, started: given the harness's mounts when ``bound`` (and the sandbox binds any), its
    ``exec`` and ``upload`` calls counted into ``counts``; ``timed`` gets ``mounts`` and ``start``."""
    from tackroom.sandbox_features import ReadOnlyMounts
    from tackroom_app import sandbox_spec

    spec = sandbox_spec(task, name)
    t0 = time.monotonic()
    if bound and isinstance(provider.create(spec), ReadOnlyMounts):
        spec = spec.model_copy(update={"mounts": await harness.mounts(task)})
    timed["mounts"] = time.monotonic() - t0
    box = provider.create(spec)
    t0 = time.monotonic()
    await box.start()
    timed["start"] = time.monotonic() - t0
    for call in ("exec", "upload"):
        counts[call] = 0
        inner = getattr(box, call)

        def counted(*args, _inner=inner, _call=call, **kwargs):
            counts[_call] += 1
            return _inner(*args, **kwargs)

        setattr(box, call, counted)
    return box
