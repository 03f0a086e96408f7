"""``tackroom serve`` under load: N rollouts of a stub harness, submitted in batches and streamed back.

    uv run python benchmarks/serve_load.py                          # 10,000 rollouts, 100 per batch, concurrency 64
    uv run python benchmarks/serve_load.py -n 1000 --batch-size 50 --concurrency 16
    uv run python benchmarks/serve_load.py --db postgresql://tackroom@127.0.0.1:5432/bench --json out.json

The service runs in its own process (this script with ``--child``, which registers the stub plugins and then runs
``tackroom serve``): harness ``stub`` (no model: one token-level turn, handed back at once), sandbox ``stub-sandbox``
(starts and stops nothing) and verifier ``stub-grader`` (reward 1), so a rollout costs only tackroom: the trial
runtime's attempt, the dispatcher, the database and HTTP. The load comes from this process, on the async client: it
submits the batches one after another and streams each one's results (server-sent events) as they finish.

Printed: submit latency p50/p99 (one ``POST /v1/batches``: the config checked, the tasks loaded, the batch and its
rollouts written), results per second (rollouts over the time from the first submit to the last result received),
and the service's resident memory (its peak, sampled every 0.2 s, and at the end).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import tackroom

REPO = Path(__file__).resolve().parents[1]


# -- the stub plugins, registered in the service's process ----------------------------------------------
class StubHarness(tackroom.Harness):
    """No model: one turn of 16 prompt ids and 8 sampled ids, at once."""

    name = "stub"

    async def run(self, task, sandbox, policy):
        turn = tackroom.TokenTurn(prompt_ids=list(range(16)), completion_ids=list(range(100, 108)),
                                  logprobs=[-0.1] * 8)
        return tackroom.Trajectory(turns=[turn], token_ids=turn.prompt_ids + turn.completion_ids,
                                   loss_mask=[0] * 16 + [1] * 8, logprobs=[0.0] * 16 + [-0.1] * 8)


class StubSandbox(tackroom.Sandbox):
    """Nothing runs in it."""

    async def start(self) -> None:
        pass

    async def exec(self, cmd, *, cwd=None, env=None, timeout=60.0, stdin=None) -> tackroom.ExecResult:
        return tackroom.ExecResult(exit_code=0)

    async def upload(self, source, dest, *, timeout=120.0) -> None:
        pass

    async def download(self, source, dest, *, timeout=120.0) -> None:
        raise FileNotFoundError(source)

    async def kill_processes(self, *, timeout: float = 10.0, keep_listening: bool = False) -> list[str]:
        return []

    async def stop(self) -> None:
        pass


class StubSandboxes(tackroom.SandboxProvider):
    name = "stub-sandbox"

    def create(self, spec):
        return StubSandbox(spec)


class StubGrader(tackroom.Verifier):
    name = "stub-grader"

    async def verify(self, task, sandbox, trajectory):
        return tackroom.Reward(score=1.0)


class StubPlugins:
    @tackroom.hookimpl
    def tackroom_harnesses(self, register):
        register.add_harness(StubHarness)

    @tackroom.hookimpl
    def tackroom_sandboxes(self, register):
        register.add_sandbox(StubSandboxes)

    @tackroom.hookimpl
    def tackroom_verifiers(self, register):
        register.add_verifier(StubGrader)


def child(serve_args: list[str], profile: str | None) -> None:
    """The service: the stub plugins registered, then ``tackroom serve`` with ``serve_args`` (under cProfile, written
    to ``profile`` when it stops, where given)."""
    import cProfile

    import typer

    import tackroom_app
    from tackroom_serve.cli import serve

    tackroom_app.get_plugin_manager().register(StubPlugins(), name="bench:serve-load")
    sys.argv = ["tackroom serve", *serve_args]
    # uvicorn restores this handler when it stops and raises the signal it caught again: exit through `finally`
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    try:
        typer.run(serve)
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(profile)


# -- the load --------------------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo, hi = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


class RssSampler:
    """The service's resident memory, every 0.2 s, in a thread."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.process, self.peak, self.last = psutil.Process(pid), 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self.last = self.process.memory_info().rss
            except Exception:
                return
            self.peak = max(self.peak, self.last)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def write_tasks(root: Path, n: int) -> list[str]:
    from tackroom.testing import write_task

    return [str(write_task(root, f"t{i:03d}", instruction=f"Stub task {i}.")) for i in range(n)]


async def load(url: str, token: str, tasks: list[str], rollouts: int, batch_size: int) -> dict[str, Any]:
    from tackroom_serve.client import AsyncServeClient

    samples = max(1, batch_size // len(tasks))
    per_batch = samples * len(tasks)
    config = {"tasks": tasks, "harness": {"name": "stub"}, "sandbox": {"name": "stub-sandbox"},
              "verifier": {"name": "stub-grader"}, "runtime": {"concurrency": per_batch, "attempts": 1}}
    latencies: list[float] = []
    states: dict[str, int] = {}
    async with AsyncServeClient(url, token, timeout=300) as client:
        async def drain(batch_id: str) -> None:
            async for outcome in client.results(batch_id, trajectory=True):
                states[outcome.state] = states.get(outcome.state, 0) + 1

        t0 = time.perf_counter()
        streams = []
        for i in range(max(1, rollouts // per_batch)):
            s0 = time.perf_counter()
            batch = await client.create_batch(config, samples=samples, idempotency_key=f"load-{i}")
            latencies.append(time.perf_counter() - s0)
            streams.append(asyncio.create_task(drain(batch.id)))
        submitted = time.perf_counter() - t0
        await asyncio.gather(*streams)
        wall = time.perf_counter() - t0
    done = sum(states.values())
    return {"rollouts": done, "batches": len(latencies), "per_batch": per_batch, "states": states,
            "submit_p50_ms": round(1000 * pct(latencies, 0.5), 1),
            "submit_p99_ms": round(1000 * pct(latencies, 0.99), 1),
            "submit_all_s": round(submitted, 2), "wall_s": round(wall, 2), "results_per_s": round(done / wall, 1)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="tackroom-serve-load-"))
    token = secrets.token_urlsafe(24)
    (work / "tokens").write_text(f"bench {token}\n")
    tasks = write_tasks(work / "tasks", args.tasks)
    serve_args = ["--folder", str(work / "svc"), "--tokens", str(work / "tokens"), "--port", "0",
                  "--concurrency", str(args.concurrency), *(["--db", args.db] if args.db else [])]
    profile = ["--profile", str(args.profile.resolve())] if args.profile else []
    service = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", *profile, "--", *serve_args],
                               stdout=subprocess.PIPE, text=True, cwd=REPO)
    line = service.stdout.readline() if service.stdout else ""
    if not line.startswith("tackroom serve: http://"):
        service.kill()
        raise SystemExit(f"the service did not start: {line!r}")
    sampler = RssSampler(service.pid)
    try:
        row = asyncio.run(load(line.split()[2].rstrip("/"), token, tasks, args.rollouts, args.batch_size))
    finally:
        sampler.stop()
        service.terminate()
        service.wait(60)
        shutil.rmtree(work, ignore_errors=True)
    return {**row, "concurrency": args.concurrency, "db": "postgresql" if args.db else "sqlite",
            "rss_peak_mb": round(sampler.peak / 2**20, 1), "rss_end_mb": round(sampler.last / 2**20, 1)}


def main() -> None:
    if "--child" in sys.argv:
        profile = sys.argv[sys.argv.index("--profile") + 1] if "--profile" in sys.argv else None
        child(sys.argv[sys.argv.index("--") + 1:], profile)
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--rollouts", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=100, help="Rollouts per batch (tasks × samples).")
    parser.add_argument("--tasks", type=int, default=10, help="Tasks per batch (each batch's samples share them).")
    parser.add_argument("--concurrency", type=int, default=64, help="The service's --concurrency.")
    parser.add_argument("--db", default=None, help="A PostgreSQL URL (default: SQLite in the service's folder).")
    parser.add_argument("--json", type=Path, default=None, help="Also write the row as JSON here.")
    parser.add_argument("--profile", type=Path, default=None, help="Write a cProfile of the service here.")
    args = parser.parse_args()
    row = run(args)
    print(f"{row['rollouts']:,} rollouts in {row['batches']} batches of {row['per_batch']} "
          f"({row['db']}, service concurrency {row['concurrency']}): states {row['states']}")
    print(f"submit latency   p50 {row['submit_p50_ms']} ms   p99 {row['submit_p99_ms']} ms   "
          f"(all batches submitted in {row['submit_all_s']} s)")
    print(f"results          {row['results_per_s']} / s   ({row['wall_s']} s from the first submit to the last result)")
    print(f"service RSS      peak {row['rss_peak_mb']} MB   at the end {row['rss_end_mb']} MB")
    if args.json:
        args.json.write_text(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
