"""The same oracle workload under the ``asyncio`` and ``ray`` executors, side by side.

    uv run python benchmarks/executor.py                       # 40 trials at concurrency 1 and 8, local sandbox
    uv run python benchmarks/executor.py -n 100 -c 4 -c 16 --num-cpus-per-trial 0.1
    uv run python benchmarks/executor.py --agent-cpu-ms 300    # each agent loop also burns 300 ms of Python CPU
    uv run python benchmarks/executor.py --address auto        # on the Ray cluster this machine belongs to

Per (executor, concurrency) it prints trials/s, the mean attempt time as the
attempt itself measured it (``attempt s``: sandbox start → teardown), and the
per-trial overhead of the executor: what the driver waited for an attempt
beyond that (``overhead ms``: for ``ray`` the task dispatch, a worker
process, shipping the trial and its result; for ``asyncio`` almost nothing).
Ray's one-off costs are printed apart: starting (or attaching to) the cluster,
and the first batch, which also starts the worker processes.

``--agent-cpu-ms`` makes each agent loop spend that much CPU in Python (as a
harness parsing tool output, tokenizing or talking MCP does): in one process
those loops queue on one GIL, in Ray workers they spread over the cores. That
is where Ray pays off on one machine; across machines it is the only option.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import shutil
import tempfile
import time
from pathlib import Path
from statistics import mean
from typing import Any

import tackroom
import tackroom_app
from tackroom._builtins.oracle_harness import OracleHarness, OracleOptions
from tackroom._runtime import TrialPlugins, TrialRuntime
from tackroom._trial import Trial
from tackroom.executors import Executor, make_executor
from tackroom_ray import RayOptions  # the ray executor's package (packages/ray)


class BusyOptions(OracleOptions):
    cpu_ms: float = 0.0


class BusyOracle(OracleHarness):
    """The oracle, plus ``cpu_ms`` of pure-Python work per episode (a stand-in for an agent loop's own CPU)."""

    name = "busy-oracle"
    Options = BusyOptions

    async def run(self, task, sandbox, policy):
        end = time.process_time() + self.options.cpu_ms / 1000
        while time.process_time() < end:
            sum(i * i for i in range(1000))
        return await super().run(task, sandbox, policy)


class TimedExecutor(Executor):
    """Wraps an executor and records, per attempt, the driver's wait and the attempt's own total."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner
        self.name = inner.name  # type: ignore[misc]
        self.options = inner.options
        self.spans: list[tuple[float, float]] = []

    async def start(self, plans: list[Any]) -> None:
        await self.inner.start(plans)

    def max_in_flight(self, concurrency: int) -> int:
        return self.inner.max_in_flight(concurrency)

    async def run(self, plan, *, manager, on_started):
        t0 = time.perf_counter()
        result, trajectory = await self.inner.run(plan, manager=manager, on_started=on_started)
        self.spans.append((time.perf_counter() - t0, result.timings.get("total", 0.0)))
        return result, trajectory


def make_tasks(root: Path, n: int) -> list[tackroom.Task]:
    """n trivial Harbor-style tasks: write a number to a file, the test checks it."""
    tasks = []
    for i in range(n):
        d = root / f"bench-{i:03d}"
        for sub in ("tests", "solution"):
            (d / sub).mkdir(parents=True)
        (d / "instruction.md").write_text(f"Write {i} to /app/out.txt")
        (d / "task.toml").write_text("[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 60\n")
        (d / "solution" / "solve.sh").write_text(f"echo {i} > /app/out.txt\n")
        (d / "tests" / "test.sh").write_text(
            f'[ "$(cat /app/out.txt)" = "{i}" ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n')
        tasks.append(tackroom.load_task(d))
    return tasks


async def measure(executor: TimedExecutor, harness_cls: type, cpu_ms: float, sandbox: str,
                  tasks: list[tackroom.Task], concurrency: int, out: Path, tag: str) -> dict[str, Any]:
    verifier = tackroom_app.instantiate("verifier", "test-script")
    plugins = TrialPlugins(harness_cls, harness_cls.Options(cpu_ms=cpu_ms), tackroom_app.instantiate("sandbox", sandbox),
                           type(verifier), verifier.options)
    items = [(Trial(task_id=t.id, task_path=str(t.path), harness="busy-oracle", sandbox=sandbox,
                    verifier="test-script", pass_index=0), t, plugins) for t in tasks]
    runtime = TrialRuntime(out / f"{executor.name}-c{concurrency}-{tag}", concurrency=concurrency, progress=False,
                           executor=executor)
    executor.spans.clear()
    t0 = time.perf_counter()
    results = await runtime.run_all(items)
    wall = time.perf_counter() - t0
    return {
        "executor": executor.name, "concurrency": concurrency, "trials": len(results), "wall_s": wall,
        "trials_per_s": len(results) / wall,
        "attempt_s": mean(inner for _, inner in executor.spans),
        "overhead_ms": 1000 * mean(max(0.0, outer - inner) for outer, inner in executor.spans),
        "errors": sum(1 for r in results if r.error is not None),
        "not_1": sum(1 for r in results if r.reward != 1.0),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--tasks", type=int, default=40)
    ap.add_argument("-c", "--concurrency", type=int, action="append", help="repeatable (default: 1 and 8)")
    ap.add_argument("--sandbox", default="local")
    ap.add_argument("--agent-cpu-ms", type=float, default=0.0, help="Python CPU each agent loop burns")
    ap.add_argument("--num-cpus-per-trial", type=float, default=0.2)
    ap.add_argument("--address", default=None, help="Ray cluster (default: attach to a running one, else start one)")
    args = ap.parse_args()
    concurrencies = args.concurrency or [1, 8]
    # Ray workers import plugin classes by module name; this file's directory is on their
    # sys.path (Ray adds the driver script's folder), so take the class from `executor`, not `__main__`.
    harness_cls = importlib.import_module(Path(__file__).stem).BusyOracle
    work = Path(tempfile.mkdtemp(prefix="tackroom-bench-executor-"))
    try:
        tasks = make_tasks(work / "tasks", args.tasks)
        local = TimedExecutor(make_executor("asyncio"))
        ray_options = RayOptions(address=args.address, num_cpus_per_trial=args.num_cpus_per_trial)
        ray = TimedExecutor(make_executor("ray", ray_options))
        t0 = time.perf_counter()
        asyncio.run(ray.start([]))
        ray_start = time.perf_counter() - t0
        warm = max(concurrencies)
        cold = asyncio.run(measure(ray, harness_cls, args.agent_cpu_ms, args.sandbox, tasks[:warm], warm,
                                   work / "runs", "cold"))
        header = (f"{'executor':8} {'conc':>4} {'trials':>6} {'wall s':>7} {'trials/s':>8} {'attempt s':>9} "
                  f"{'overhead ms':>11} {'errors':>6}")
        print(f"oracle × {args.tasks} trivial tasks on the {args.sandbox} sandbox; agent CPU {args.agent_cpu_ms:g} ms "
              f"per trial; ray: {args.num_cpus_per_trial:g} CPU per trial\n")
        print(header)
        print("-" * len(header))
        for c in concurrencies:
            for executor in (local, ray):
                row = asyncio.run(measure(executor, harness_cls, args.agent_cpu_ms, args.sandbox, tasks, c,
                                          work / "runs", "warm"))
                flag = "" if row["errors"] == 0 and row["not_1"] == 0 else f"  ({row['not_1']} trials did not score 1)"
                print(f"{row['executor']:8} {c:>4} {row['trials']:>6} {row['wall_s']:>7.2f} {row['trials_per_s']:>8.2f} "
                      f"{row['attempt_s']:>9.3f} {row['overhead_ms']:>11.1f} {row['errors']:>6}{flag}")
        print(f"\nray one-off costs: cluster start/attach {ray_start:.1f} s; first {warm} trials (starting worker "
              f"processes) {cold['wall_s']:.1f} s, overhead {cold['overhead_ms']:.0f} ms per trial")
        print("attempt s = the attempt's own time (sandbox start → teardown); overhead ms = what the driver waited "
              "beyond it per attempt.")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
