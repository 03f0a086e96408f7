"""Trial throughput and framework overhead: oracle over N tasks at concurrency C.

    uv run python benchmarks/trial_overhead.py --sandbox local --sandbox docker -n 24 -c 1 -c 4 -c 20

For each (sandbox, concurrency) it prints trials/s, mean seconds per trial,
errors, and the share of trial wall time spent outside sandbox operations
(start, exec, transfers, stop) — tackroom's own overhead. A last column compares
job throughput with Harbor 0.25's docker environment measured on this kind of
machine (6 trivial oracle tasks: ~82 s at concurrency 1, ~29 s at 4; ~12.9 s per
trial of which ~10 s is teardown); pass --harbor-seconds to use your own figure.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from statistics import mean, median

import tackroom
import tackroom_app
from tackroom._runtime import TrialPlugins, TrialRuntime
from tackroom._trial import Trial

REPO = Path(__file__).resolve().parents[1]
HARBOR_ANCHOR = {1: 82.0 / 6, 4: 29.0 / 6}  # seconds of job wall time per trial, Harbor 0.25 + docker


class TimedSandbox:
    """Wraps a sandbox and adds up the time spent inside its operations."""

    def __init__(self, inner: tackroom.Sandbox, ledger: dict[str, float]) -> None:
        self._inner = inner
        self._ledger = ledger
        self.notes = inner.notes
        self.spec = inner.spec

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if name not in ("start", "exec", "upload", "download", "stop", "read_file", "write_file", "snapshot",
                        "kill_processes"):
            return attr

        async def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return await attr(*args, **kwargs)
            finally:
                self._ledger[self.spec.name] = self._ledger.get(self.spec.name, 0.0) + time.perf_counter() - t0

        return timed


def timed_provider(provider: tackroom.SandboxProvider, ledger: dict[str, float]):
    original = provider.create
    provider.create = lambda spec: TimedSandbox(original(spec), ledger)  # type: ignore[method-assign]
    return provider


def make_tasks(root: Path, n: int) -> list[tackroom.Task]:
    """n trivial Harbor-style tasks: write a file, test checks it."""
    tasks = []
    for i in range(n):
        d = root / f"bench-{i:03d}"
        for sub in ("environment", "tests", "solution"):
            (d / sub).mkdir(parents=True)
        (d / "instruction.md").write_text(f"Write {i} to /app/out.txt")
        (d / "task.toml").write_text("[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n")
        (d / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
        (d / "solution" / "solve.sh").write_text(f"echo {i} > /app/out.txt\n")
        (d / "tests" / "test.sh").write_text(
            f'[ "$(cat /app/out.txt)" = "{i}" ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n')
        tasks.append(tackroom.load_task(d))
    return tasks


async def measure(sandbox_name: str, tasks: list[tackroom.Task], concurrency: int, out: Path) -> dict:
    ledger: dict[str, float] = {}
    provider = timed_provider(tackroom_app.instantiate("sandbox", sandbox_name), ledger)
    oracle = tackroom_app.instantiate("harness", "oracle")
    verifier = tackroom_app.instantiate("verifier", "test-script")
    plugins = TrialPlugins.from_instances(oracle, provider, verifier)
    items = [(Trial(task_id=t.id, task_path=str(t.path), harness="oracle", sandbox=sandbox_name,
                    verifier="test-script"), t, plugins) for t in tasks]
    runtime = TrialRuntime(out / f"{sandbox_name}-c{concurrency}", concurrency=concurrency, progress=False)
    t0 = time.perf_counter()
    results = await runtime.run_all(items)
    wall = time.perf_counter() - t0
    per_trial = [r.timings["total"] for r in results]
    overhead = [max(0.0, r.timings["total"] - ledger.get(f"{r.trial_id}-a{r.attempt}", 0.0)) / r.timings["total"]
                for r in results if r.timings.get("total")]
    return {
        "sandbox": sandbox_name, "concurrency": concurrency, "trials": len(results), "wall_s": wall,
        "trials_per_s": len(results) / wall, "mean_trial_s": mean(per_trial),
        "errors": sum(1 for r in results if r.error is not None),
        "not_1": sum(1 for r in results if r.reward != 1.0),
        "overhead_share": mean(overhead),
        # the kill-and-confirm step between the agent's turn and grading (the runtime's `kill_agent` phase)
        "kill_ms": 1000 * median([r.timings["kill_agent"] for r in results if "kill_agent" in r.timings] or [0.0]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sandbox", action="append", help="local and/or docker (default: both installed)")
    ap.add_argument("-n", "--tasks", type=int, default=24)
    ap.add_argument("-c", "--concurrency", type=int, action="append")
    ap.add_argument("--harbor-seconds", type=float, help="Harbor job seconds per trial to compare against")
    args = ap.parse_args()
    sandboxes = args.sandbox or [s for s in ("local", "docker")
                                 if s in [e.name for e in tackroom_app.get_plugin_manager().entries("sandbox")]]
    concurrencies = args.concurrency or [1, 4, 20]
    work = Path(tempfile.mkdtemp(prefix="tackroom-bench-"))
    try:
        tasks = make_tasks(work / "tasks", args.tasks)
        header = f"{'sandbox':8} {'conc':>4} {'trials':>6} {'wall s':>7} {'trials/s':>8} {'s/trial':>7} " \
                 f"{'errors':>6} {'overhead':>8} {'kill ms':>7} {'vs Harbor':>9}"
        print(header)
        print("-" * len(header))
        for sandbox in sandboxes:
            for c in concurrencies:
                row = asyncio.run(measure(sandbox, tasks, c, work / "runs"))
                harbor = args.harbor_seconds or HARBOR_ANCHOR.get(c)
                ratio = f"{harbor / (row['wall_s'] / row['trials']):8.1f}x" if harbor else "       -"
                print(f"{row['sandbox']:8} {c:>4} {row['trials']:>6} {row['wall_s']:>7.2f} {row['trials_per_s']:>8.2f} "
                      f"{row['mean_trial_s']:>7.3f} {row['errors']:>6} {row['overhead_share']:>7.1%} {row['kill_ms']:>7.1f} {ratio}")
        print("\noverhead = share of trial wall time outside sandbox operations (start/exec/transfer/kill/stop).")
        print("kill ms = median of the kill-and-confirm step (kill_processes) between the agent's turn and grading.")
        print("vs Harbor = job throughput relative to Harbor 0.25 + docker on the same kind of machine "
              "(anchor: 6 trivial oracle trials in ~82 s at c=1, ~29 s at c=4).")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
