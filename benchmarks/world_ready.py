"""How long an archipelago world takes to be ready in a trial, phase by phase, beside a baseline from git.

    uv run python benchmarks/world_ready.py                                  # acme on local, 6 trials a variant
    uv run python benchmarks/world_ready.py --sandbox docker --trials 4 \\
        --task examples/worlds/mercor/tasks/find-q3-revenue                   # Mercor's servers (Python 3.13)

Three variants, each in a process of its own, their trials interleaved round by round (so a busy moment of a
shared machine hits all three): ``baseline`` (the archipelago harness of ``--baseline-ref``, default HEAD, as
git has it), ``uploaded`` (this checkout's, on a sandbox given no mounts: the build uploaded) and ``bound``
(this checkout's as the runtime runs it: the build bound read-only through ``Harness.mounts``). Each variant's
first trial makes what is cached (sites, the build, the chat template) and is left out. Per phase, the median of
the rest: ``mounts`` (the harness's mounts), ``start`` (sandbox), ``install`` (interpreters, build, uploads),
``gateway`` (start to ``/health``), ``ready`` (setup: the world ready, what a trial waits for), ``list`` (the
MCP session's connect and tool list), ``stop`` (sandbox), ``execs`` and ``uploads`` (calls during setup).
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

PACKAGE = "plugins/harnesses/archipelago/src"
PHASES = ("mounts", "start", "install", "gateway", "ready", "list", "stop", "execs", "uploads")


# -- one variant's process: runs a trial each time it reads a line ------------------------------------
async def serve(sandbox: str, task_dir: str, bound: bool) -> None:
    from tackroom import load_task
    from tackroom_archipelago import ArchipelagoHarness
    from tackroom_archipelago import harness as module
    from tackroom_archipelago.mcp_session import WorldMcp

    provider = sandbox_provider(sandbox)
    task = load_task(Path(task_dir))
    await module.chat_template("smollm2")
    timed: dict[str, float] = {}

    def clock(owner, name: str, phase: str) -> None:
        inner = getattr(owner, name)

        async def wrapped(*args, **kwargs):
            t0 = time.monotonic()
            try:
                return await inner(*args, **kwargs)
            finally:
                timed[phase] = timed.get(phase, 0.0) + time.monotonic() - t0

        setattr(owner, name, wrapped)

    clock(module, "install_world", "install")
    clock(module, "start_gateway", "gateway")
    loop = asyncio.get_running_loop()
    while await loop.run_in_executor(None, sys.stdin.readline):
        timed.clear()
        harness = ArchipelagoHarness({})
        counts: dict[str, int] = {}
        box = await started_sandbox(provider, harness, task, f"world-ready-{os.getpid()}", bound, timed, counts)
        try:
            t0 = time.monotonic()
            await harness.setup(box, task)
            timed["ready"] = time.monotonic() - t0 + timed["mounts"]
            timed["execs"], timed["uploads"] = counts["exec"], counts["upload"]
            t0 = time.monotonic()
            session = WorldMcp(harness.mcp_client, connect_timeout=120)
            await session.connect()
            await session.list_tools()
            await session.close()
            timed["list"] = time.monotonic() - t0
        finally:
            t0 = time.monotonic()
            await box.stop()
            timed["stop"] = time.monotonic() - t0
        print(json.dumps({k: round(timed.get(k, 0.0), 3) for k in PHASES}), flush=True)


# -- the driver ---------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandbox", default="local", choices=["local", "docker"])
    parser.add_argument("--task", default=str(REPO / "examples/worlds/acme/tasks/q3-revenue-by-region"))
    parser.add_argument("--trials", type=int, default=6, help="per variant, the first (warm-up) included")
    parser.add_argument("--baseline-ref", default="HEAD", help="git ref of the baseline harness; 'none' to skip it")
    parser.add_argument("--serve", choices=["bound", "uploaded"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.sandbox, args.task, args.serve == "bound"))
        return
    with tempfile.TemporaryDirectory(prefix="world-ready-") as tmp:
        variants: dict[str, tuple[list[str], dict[str, str]]] = {}
        me = [sys.executable, __file__, "--sandbox", args.sandbox, "--task", args.task]
        if args.baseline_ref != "none":
            env = {**os.environ, "PYTHONPATH": str(baseline_tree(args.baseline_ref, (PACKAGE,), Path(tmp))[0])}
            variants[f"baseline ({args.baseline_ref})"] = ([*me, "--serve", "uploaded"], env)
        variants["uploaded"] = ([*me, "--serve", "uploaded"], dict(os.environ))
        variants["bound"] = ([*me, "--serve", "bound"], dict(os.environ))
        procs = {name: subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for name, (argv, env) in variants.items()}
        rows: dict[str, list[dict[str, float]]] = {name: [] for name in procs}
        try:
            for trial in range(args.trials):
                for name, proc in procs.items():
                    assert proc.stdin is not None and proc.stdout is not None
                    proc.stdin.write("go\n")
                    proc.stdin.flush()
                    line = proc.stdout.readline()
                    if not line:
                        raise SystemExit(f"{name}: the trial process died (its output is above)")
                    rows[name].append(json.loads(line))
                    print(f"trial {trial} {name:>16}: " + " ".join(f"{k} {v:g}" for k, v in rows[name][-1].items()),
                          file=sys.stderr, flush=True)
        finally:
            for proc in procs.values():
                proc.stdin.close()  # type: ignore[union-attr]
                proc.wait(timeout=120)
    medians = {name: {k: statistics.median(r[k] for r in runs[1:] or runs) for k in PHASES} for name, runs in rows.items()}
    print(f"\n{args.sandbox}, {Path(args.task).name}: median of {max(args.trials - 1, 1)} trials a variant "
          "(seconds; execs and uploads are counts during setup)\n")
    print_phase_table(medians, PHASES)


if __name__ == "__main__":
    main()
