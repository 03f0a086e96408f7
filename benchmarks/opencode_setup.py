"""How long the opencode harness takes to set a trial up, step by step, beside a baseline from git.

    uv run python benchmarks/opencode_setup.py                  # local, 6 rounds
    uv run python benchmarks/opencode_setup.py --concurrent 4 --load 2   # a busy machine

Three variants, each in a process of its own, their rounds interleaved (so a busy moment of a shared machine hits
all three): ``baseline`` (the harness and agent kit of ``--baseline-ref``, default HEAD, as git has them),
``uploaded`` (this checkout's, on a sandbox given no mounts: opencode and rg uploaded) and ``bound`` (this
checkout's as the runtime runs it: opencode and rg bound read-only through ``Harness.mounts``). A round runs
``--concurrent`` trials of each variant at once, one variant after the other; ``--load`` keeps that many
``yes > /dev/null`` busy meanwhile. The first round of each variant (what is cached is made there) is left out.
Per trial: ``mounts`` (the harness's mounts), ``start`` (sandbox), ``setup`` (the harness's setup), ``ready``
(mounts + setup: what a trial waits for before OpenCode can start), ``stop`` (sandbox), ``execs`` and
``uploads`` (calls during setup); the table holds the median over every trial after the first round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from variants import REPO, baseline_tree, print_phase_table, sandbox_provider, started_sandbox

PACKAGES = ("plugins/harnesses/opencode/src", "packages/agent-kit/src")
PHASES = ("mounts", "start", "setup", "ready", "stop", "execs", "uploads")
TASK = REPO / "examples" / "tasks" / "hello-file"


# -- one variant's process: runs a round of trials each time it reads a line -------------------------
async def trial(provider, task, bound: bool, n: int) -> dict[str, float]:
    from tackroom_opencode.harness import OpenCodeHarness

    timed: dict[str, float] = {}
    counts: dict[str, int] = {}
    harness = OpenCodeHarness({})
    box = await started_sandbox(provider, harness, task, f"opencode-setup-{os.getpid()}-{n}", bound, timed, counts)
    try:
        t0 = time.monotonic()
        await harness.setup(box, task)
        timed["setup"] = time.monotonic() - t0
        timed["ready"] = timed["setup"] + timed["mounts"]
        timed["execs"], timed["uploads"] = counts["exec"], counts["upload"]
    finally:
        t0 = time.monotonic()
        await box.stop()
        timed["stop"] = time.monotonic() - t0
    return {k: round(timed.get(k, 0.0), 3) for k in PHASES}


async def serve(sandbox: str, bound: bool, concurrent: int) -> None:
    from tackroom import load_task

    provider = sandbox_provider(sandbox)
    task = load_task(TASK)
    loop = asyncio.get_running_loop()
    n = 0
    while await loop.run_in_executor(None, sys.stdin.readline):
        rows = await asyncio.gather(*(trial(provider, task, bound, n + i) for i in range(concurrent)))
        n += concurrent
        print(json.dumps(rows), flush=True)


# -- the driver ---------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandbox", default="local", choices=["local", "docker"])
    parser.add_argument("--rounds", type=int, default=6, help="per variant, the first (warm-up) included")
    parser.add_argument("--concurrent", type=int, default=1, help="trials of a variant at once")
    parser.add_argument("--load", type=int, default=0, help="busy processes (yes > /dev/null) while measuring")
    parser.add_argument("--baseline-ref", default="HEAD", help="git ref of the baseline harness; 'none' to skip it")
    parser.add_argument("--serve", choices=["bound", "uploaded"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.sandbox, args.serve == "bound", args.concurrent))
        return
    load: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="opencode-setup-") as tmp:
        variants: dict[str, tuple[list[str], dict[str, str]]] = {}
        me = [sys.executable, __file__, "--sandbox", args.sandbox, "--concurrent", str(args.concurrent)]
        if args.baseline_ref != "none":
            paths = os.pathsep.join(str(p) for p in baseline_tree(args.baseline_ref, PACKAGES, Path(tmp)))
            variants[f"baseline ({args.baseline_ref})"] = ([*me, "--serve", "uploaded"], {**os.environ, "PYTHONPATH": paths})
        variants["uploaded"] = ([*me, "--serve", "uploaded"], dict(os.environ))
        variants["bound"] = ([*me, "--serve", "bound"], dict(os.environ))
        procs = {name: subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for name, (argv, env) in variants.items()}
        rows: dict[str, list[list[dict[str, float]]]] = {name: [] for name in procs}
        try:
            load = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(args.load)]
            for r in range(args.rounds):
                order = list(procs)[r % len(procs):] + list(procs)[:r % len(procs)]
                for name in order:
                    proc = procs[name]
                    assert proc.stdin is not None and proc.stdout is not None
                    proc.stdin.write("go\n")
                    proc.stdin.flush()
                    line = proc.stdout.readline()
                    if not line:
                        raise SystemExit(f"{name}: the trial process died (its output is above)")
                    rows[name].append(json.loads(line))
                    for row in rows[name][-1]:
                        print(f"round {r} {name:>16}: " + " ".join(f"{k} {v:g}" for k, v in row.items()),
                              file=sys.stderr, flush=True)
        finally:
            for p in load:
                p.kill()
                p.wait()
            for proc in procs.values():
                proc.stdin.close()  # type: ignore[union-attr]
                proc.wait(timeout=120)
    kept = {name: [row for rnd in (rounds[1:] or rounds) for row in rnd] for name, rounds in rows.items()}
    medians = {name: {k: statistics.median(r[k] for r in runs) for k in PHASES} for name, runs in kept.items()}
    trials = len(next(iter(kept.values())))
    print(f"\n{args.sandbox}, {TASK.name}, {args.concurrent} at once, {args.load} busy processes: median of {trials} "
          "trials a variant (seconds; execs and uploads are counts during setup)\n")
    print_phase_table(medians, PHASES)


if __name__ == "__main__":
    main()
