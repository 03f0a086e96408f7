"""A trial's phases per harness and sandbox, at several concurrencies, with harness start-up ahead of the turn or not.

    uv run python benchmarks/trial_overhead.py                        # oracle + archipelago, local (+ docker), c 1 4 16
    uv run python benchmarks/trial_overhead.py --harness oracle --sandbox local -n 8 -c 1 -c 4
    uv run python benchmarks/trial_overhead.py --harness mercor --sandbox docker -n 8 -c 1 -c 4   # Mercor's servers

Harnesses: ``oracle`` (N trivial Harbor-style tasks: the solution writes a file, test.sh checks it; no model),
``archipelago`` (the acme example world's tasks, cycled) and ``mercor`` (examples/worlds/mercor, docker only; off
by default). The archipelago harness's policy is a stub chat endpoint served in a thread of this process: every
request is answered at once with "Done." and no tool call, so a trial is the world's start-up, one model turn, the
grading and the teardown. Each (harness, sandbox) first runs one trial that is not counted (it makes what is cached:
the world's build, images, the chat template). Then per concurrency C, two rows side by side: ``prepare_ahead`` 0
(a trial starts its sandbox and sets up its harness on its turn) and ``prepare_ahead`` C (C more trials start and
set up while others run, and wait, prepared, for a turn).

Per row: trials/min (trials over the row's wall time); ``start`` p50/p99 (the ``sandbox_start`` phase); ``setup``
p50 (``harness_setup``); ``ready`` p50: how long a turn stood idle before the trial's agent started in it. With
prepare_ahead 0 that is the trial's start and setup (mounts, sandbox start, verifier prepare, harness setup); with
prepare_ahead it is the time from a turn coming free to the next trial's agent starting, ~0 while prepared trials
are waiting. The first C turns of a row are left out of ``ready`` (nothing could be prepared before the row began);
the JSON has it over all trials too. ``total`` p50 is the trial's wall time less its ``prepared_wait``. ``kill``
p50 is the kill-and-confirm step before grading (``kill_agent``). For oracle rows only: ``outside`` (share of the
trial's time outside sandbox operations: tackroom's own cost; for a model harness the agent's turn would count) and
``vs Harbor`` (job throughput over Harbor 0.25 + docker on the project's 2-core machine: 6 trivial oracle tasks in
~82 s at concurrency 1, ~29 s at 4; ``--harbor-seconds`` for your own figure).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from statistics import mean
from typing import Any

import tackroom
import tackroom_app
from tackroom._runtime import TrialPlugins, TrialRuntime
from tackroom._trial import Trial

REPO = Path(__file__).resolve().parents[1]
HARBOR_ANCHOR = {1: 82.0 / 6, 4: 29.0 / 6}  # seconds of job wall time per trial, Harbor 0.25 + docker
ACME_TASKS = REPO / "examples/worlds/acme/tasks"
MERCOR_TASKS = REPO / "examples/worlds/mercor/tasks"
BEFORE_AGENT = ("harness_mounts", "sandbox_start", "verifier_prepare", "harness_setup")
HOLDS_TURN = ("harness_run", "kill_agent", "verify", "regrade")  # the attempt gives its turn back before teardown
SANDBOX_OPS = ("start", "exec", "upload", "download", "read_file", "write_file", "snapshot", "restore_image_tools",
               "fresh_folder", "upload_pristine", "kill_processes", "set_network", "run_grader", "stop")


# -- the stub policy -------------------------------------------------------------------------------------
class StubChatEngine:
    """An OpenAI-compatible chat endpoint in a thread of its own: every request is answered at once with a final
    assistant message ("Done.", no tool call); ``/v1/models`` gives a context length so no token is counted short."""

    def __init__(self, reply: str = "Done.", max_model_len: int = 32768) -> None:
        from aiohttp import web

        self.reply, self.max_model_len, self.requests = reply, max_model_len, 0
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop = asyncio.new_event_loop()
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True, name="stub-chat-engine")
        self._thread.start()
        if not ready.wait(30):
            raise RuntimeError("the stub chat engine did not start")

    def _serve(self, ready: threading.Event) -> None:
        from aiohttp import web

        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._runner.setup())
        self._loop.run_until_complete(web.TCPSite(self._runner, "127.0.0.1", self.port).start())
        ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())

    async def _models(self, request):
        from aiohttp import web

        return web.json_response({"data": [{"id": "stub", "max_model_len": self.max_model_len}]})

    async def _chat(self, request):
        from aiohttp import web

        await request.read()
        self.requests += 1
        return web.json_response({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": self.reply}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 2, "total_tokens": 102}})

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


# -- what each harness runs ------------------------------------------------------------------------------
@dataclass
class Bench:
    """One harness's side of the benchmark: its tasks, options and policy, and the sandbox options it needs."""

    name: str
    harness: str
    tasks: list[tackroom.Task]
    harness_options: dict[str, Any] = field(default_factory=dict)
    policy: tackroom.Policy | None = None
    sandbox_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    sandboxes: tuple[str, ...] = ("local", "docker")
    verifier: str = "test-script"

    def task(self, i: int) -> tackroom.Task:
        return self.tasks[i % len(self.tasks)]


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


def world_tasks(folder: Path) -> list[tackroom.Task]:
    return [tackroom.load_task(d) for d in sorted(folder.iterdir()) if (d / "task.toml").is_file()]


def make_bench(name: str, work: Path, n: int, engine: StubChatEngine | None, docker_image: str) -> Bench:
    if name == "oracle":
        return Bench("oracle", "oracle", make_tasks(work / "tasks", n + 1))  # +1: the warm-up's own
    assert engine is not None
    policy = tackroom.Policy(base_url=engine.url, model="stub")
    options = {"endpoint": "chat"}  # no /completions probe per trial: the stub serves chat only
    if name == "archipelago":
        # acme's tasks name no image; the docker sandbox's default (debian) has no python3 for the world's servers
        return Bench("archipelago", "archipelago", world_tasks(ACME_TASKS), options, policy,
                     {"docker": {"default_image": docker_image}})
    if name == "mercor":
        return Bench("mercor", "archipelago", world_tasks(MERCOR_TASKS), options, policy,
                     {"docker": {"cli_timeout_sec": 300}}, sandboxes=("docker",))
    raise SystemExit(f"unknown harness {name!r}: oracle, archipelago or mercor")


# -- sandbox operations, timed --------------------------------------------------------------------------
def time_sandbox_ops(provider: tackroom.SandboxProvider, ledger: dict[str, float]) -> None:
    """Adds each sandbox's time inside its operations to ``ledger[spec.name]``, patching the instance (not wrapping
    it: the runtime asks the sandbox's class which features it has). A call inside another one counts once."""
    original = provider.create

    def create(spec):
        box = original(spec)
        depth = [0]
        for name in SANDBOX_OPS:
            inner = getattr(box, name, None)
            if inner is None:
                continue

            async def timed(*args, _inner=inner, **kwargs):
                depth[0] += 1
                t0 = time.perf_counter()
                try:
                    return await _inner(*args, **kwargs)
                finally:
                    depth[0] -= 1
                    if depth[0] == 0:
                        ledger[spec.name] = ledger.get(spec.name, 0.0) + time.perf_counter() - t0

            setattr(box, name, timed)
        return box

    provider.create = create  # type: ignore[method-assign]


# -- one row -------------------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float | None:
    """The q-quantile of ``values``, interpolated between the two nearest ranks (p50 is the median); None when
    there are none. With 32 trials, p99 is nearly the slowest one."""
    if not values:
        return None
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return round(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo), 4)


def ready_times(results: list[tackroom.TrialResult], t0: float, turns: int, ahead: int) -> list[float]:
    """Per trial whose agent ran, in the order the agents started: how long its turn stood idle before.

    prepare_ahead 0: a trial holds its turn from before its sandbox starts, so that is its start and setup. With
    prepare_ahead, a turn is taken right before the agent's run and given back after grading: the k-th agent start
    took the k-th turn to come free (``turns`` of them free at the row's start ``t0``, then one per trial at the end
    of its grading), and waited for it from then on. Times come from each result's start and its phases."""
    ran = [r for r in results if "harness_run" in r.timings]
    if not ahead:
        starts = sorted((datetime.fromisoformat(r.started_at).timestamp(), r) for r in ran)
        return [sum(r.timings.get(k, 0.0) for k in BEFORE_AGENT) for _, r in starts]
    agent = []
    freed = [t0] * turns
    for r in ran:
        began = (datetime.fromisoformat(r.started_at).timestamp() + sum(r.timings.get(k, 0.0) for k in BEFORE_AGENT)
                 + r.timings.get("prepared_wait", 0.0))
        agent.append(began)
        freed.append(began + sum(r.timings.get(k, 0.0) for k in HOLDS_TURN))
    return [max(0.0, a - f) for a, f in zip(sorted(agent), sorted(freed), strict=False)]


async def run_trials(bench: Bench, provider: tackroom.SandboxProvider, sandbox: str, first: int, n: int,
                     concurrency: int, ahead: int, out: Path) -> tuple[list[tackroom.TrialResult], float, float]:
    harness = tackroom_app.instantiate("harness", tackroom_app.PluginSelection(name=bench.harness, **bench.harness_options))
    verifier = tackroom_app.instantiate("verifier", bench.verifier)
    plugins = TrialPlugins.from_instances(harness, provider, verifier, policy=bench.policy, harness_label=bench.name)
    items = []
    for i in range(first, first + n):
        task = bench.task(i)
        trial = Trial.for_task(task, harness=bench.name, sandbox=sandbox, verifier=bench.verifier, pass_index=i)
        items.append((trial, task, plugins))
    runtime = TrialRuntime(out, concurrency=concurrency, prepare_ahead=ahead, attempts=1, progress=False)
    t0, c0 = time.time(), time.perf_counter()
    results = await runtime.run_all(items)
    return results, time.perf_counter() - c0, t0


def summarise(bench: Bench, sandbox: str, concurrency: int, ahead: int, results: list[tackroom.TrialResult],
              wall: float, t0: float, ledger: dict[str, float], harbor_seconds: float | None) -> dict[str, Any]:
    def phase(key: str) -> list[float]:
        return [r.timings[key] for r in results if key in r.timings]

    own = [r.timings["total"] - r.timings.get("prepared_wait", 0.0) for r in results if r.timings.get("total")]
    ready = ready_times(results, t0, concurrency, ahead)
    steady = ready[concurrency:] or ready
    errors = [r for r in results if r.error is not None]
    row: dict[str, Any] = {
        "harness": bench.name, "sandbox": sandbox, "concurrency": concurrency, "prepare_ahead": ahead,
        "trials": len(results), "errors": len(errors), "wall_s": round(wall, 3),
        "trials_per_min": round(60 * len(results) / wall, 2),
        "sandbox_start_p50": pct(phase("sandbox_start"), 0.5), "sandbox_start_p99": pct(phase("sandbox_start"), 0.99),
        "harness_setup_p50": pct(phase("harness_setup"), 0.5),
        "ready_p50": pct(steady, 0.5), "ready_p50_all": pct(ready, 0.5), "ready_max": pct(ready, 1.0),
        "prepared_wait_p50": pct(phase("prepared_wait"), 0.5),
        "total_p50": pct(own, 0.5), "kill_agent_p50": pct(phase("kill_agent"), 0.5),
        "teardown_p50": pct(phase("teardown"), 0.5),
        "reward_mean": round(mean([r.reward for r in results if r.reward is not None] or [0.0]), 4),
        "error_messages": dict(Counter(f"{r.error.phase}: {r.error.type}: {r.error.message[:200]}"
                                       for r in errors).most_common(5)),
        "outside_sandbox_ops": None, "vs_harbor": None,
    }
    if bench.harness == "oracle":
        shares = [max(0.0, t - ledger.get(f"{r.trial_id}-a{r.attempt}", 0.0)) / t
                  for r, t in ((r, r.timings["total"] - r.timings.get("prepared_wait", 0.0)) for r in results
                               if r.timings.get("total")) if t > 0]
        row["outside_sandbox_ops"] = round(mean(shares), 4) if shares else None
        harbor = harbor_seconds or HARBOR_ANCHOR.get(concurrency)
        row["vs_harbor"] = round(harbor / (wall / len(results)), 2) if harbor and results else None
    return row


# -- the table -------------------------------------------------------------------------------------------
COLUMNS = [  # header, key, width, format
    ("harness", "harness", 11, "s"), ("sandbox", "sandbox", 7, "s"), ("conc", "concurrency", 4, "d"),
    ("ahead", "prepare_ahead", 5, "d"), ("trials", "trials", 6, "d"), ("err", "errors", 3, "d"),
    ("trials/min", "trials_per_min", 10, ".1f"), ("start p50", "sandbox_start_p50", 9, ".3f"),
    ("start p99", "sandbox_start_p99", 9, ".3f"), ("setup p50", "harness_setup_p50", 9, ".3f"),
    ("ready p50", "ready_p50", 9, ".3f"), ("total p50", "total_p50", 9, ".3f"), ("kill ms", "kill_agent_p50", 7, "ms"),
    ("outside", "outside_sandbox_ops", 7, "%"), ("vs Harbor", "vs_harbor", 9, "x"),
]


def cell(value: Any, width: int, fmt: str) -> str:
    if value is None:
        text = "-"
    elif fmt == "ms":
        text = f"{1000 * value:.1f}"
    elif fmt == "%":
        text = f"{value:.1%}"
    elif fmt == "x":
        text = f"{value:.1f}x"
    else:
        text = format(value, fmt)
    return text.ljust(width) if fmt == "s" else text.rjust(width)


def header() -> str:
    return " ".join(h.ljust(w) if f == "s" else h.rjust(w) for h, _, w, f in COLUMNS)


def line(row: dict[str, Any]) -> str:
    return " ".join(cell(row[k], w, f) for _, k, w, f in COLUMNS)


def docker_works() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def ahead_values(spec: list[str], concurrency: int) -> list[int]:
    values = []
    for s in spec:
        v = concurrency if s == "c" else int(s)
        if v not in values:
            values.append(v)
    return values


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--harness", action="append", choices=["oracle", "archipelago", "mercor"],
                    help="repeatable (default: oracle and archipelago)")
    ap.add_argument("--sandbox", action="append", choices=["local", "docker"],
                    help="repeatable (default: local, and docker when `docker info` works)")
    ap.add_argument("-c", "--concurrency", type=int, action="append", help="repeatable (default: 1, 4, 16)")
    ap.add_argument("--prepare-ahead", action="append", metavar="N|c",
                    help="repeatable; 'c' is the row's concurrency (default: 0 and c)")
    ap.add_argument("-n", "--trials", type=int, default=32, help="trials per row (default 32)")
    ap.add_argument("--docker-image", default="python:3.13-slim-bookworm",
                    help="image of world tasks that name none, on docker (default python:3.13-slim-bookworm; a host "
                         "CPython of its version, e.g. `uv python install 3.13`, keeps the world's compile off the trial)")
    ap.add_argument("--harbor-seconds", type=float, help="Harbor job seconds per trial to compare oracle rows against")
    ap.add_argument("--json", type=Path, help="write every row (and the run's settings) here")
    ap.add_argument("--keep", action="store_true", help="keep the run directories (printed) instead of removing them")
    args = ap.parse_args()
    if args.trials < 1 or any(c < 1 for c in args.concurrency or []):
        ap.error("-n and -c must be at least 1")
    if any(not (a == "c" or a.isdigit()) for a in args.prepare_ahead or []):
        ap.error("--prepare-ahead takes a whole number or 'c' (the row's concurrency)")
    harnesses = args.harness or ["oracle", "archipelago"]
    concurrencies = args.concurrency or [1, 4, 16]
    installed = {e.name for e in tackroom_app.get_plugin_manager().entries("sandbox")}
    if args.sandbox:
        sandboxes = args.sandbox
    else:
        sandboxes = [s for s in ("local", "docker") if s in installed and (s != "docker" or docker_works())]
    missing = [s for s in sandboxes if s not in installed]
    if missing:
        ap.error(f"sandbox plugin(s) not installed: {', '.join(missing)}")

    work = Path(tempfile.mkdtemp(prefix="tackroom-bench-"))
    engine = StubChatEngine() if any(h != "oracle" for h in harnesses) else None
    rows: list[dict[str, Any]] = []
    warmups: list[dict[str, Any]] = []
    began = time.perf_counter()
    try:
        print(f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}; "
              f"{args.trials} trials a row", flush=True)
        print(header())
        print("-" * len(header()), flush=True)
        for name in harnesses:
            bench = make_bench(name, work / name, args.trials, engine, args.docker_image)
            for sandbox in sandboxes:
                if sandbox not in bench.sandboxes:
                    print(f"({name} runs on {', '.join(bench.sandboxes)} only: {sandbox} skipped)", flush=True)
                    continue
                ledger: dict[str, float] = {}
                options = tackroom_app.PluginSelection(name=sandbox, **bench.sandbox_options.get(sandbox, {}))
                provider = tackroom_app.instantiate("sandbox", options)
                time_sandbox_ops(provider, ledger)
                # The first trial makes what is cached (world build, image, chat template): run it, count it not.
                results, wall, _ = asyncio.run(run_trials(bench, provider, sandbox, 0, 1, 1, 0,
                                                          work / "runs" / f"{name}-{sandbox}-warm-up"))
                warm = {"harness": name, "sandbox": sandbox, "wall_s": round(wall, 3),
                        "error": None if results[0].error is None else results[0].error.message[:500]}
                warmups.append(warm)
                print(f"  ({name} on {sandbox}: warm-up trial {wall:.1f} s"
                      + (f", failed: {warm['error']}" if warm["error"] else "") + ")", file=sys.stderr, flush=True)
                first = 1
                for c in concurrencies:
                    for ahead in ahead_values(args.prepare_ahead or ["0", "c"], c):
                        ledger.clear()
                        out = work / "runs" / f"{name}-{sandbox}-c{c}-a{ahead}"
                        results, wall, t0 = asyncio.run(run_trials(bench, provider, sandbox, first, args.trials, c,
                                                                   ahead, out))
                        first += args.trials
                        row = summarise(bench, sandbox, c, ahead, results, wall, t0, ledger, args.harbor_seconds)
                        rows.append(row)
                        print(line(row), flush=True)
                        for message, count in row["error_messages"].items():
                            print(f"    {count} x {message}", file=sys.stderr, flush=True)
        took = time.perf_counter() - began
        print(f"\n{took:.0f} s in all. ready = how long a turn stood idle before the trial's agent started in it "
              "(p50, the first `conc` turns left out); total = the trial's wall time less its prepared_wait;")
        print("outside = share of an oracle trial's time outside sandbox operations; vs Harbor = oracle job "
              "throughput over Harbor 0.25 + docker (anchor: 6 trivial oracle trials in ~82 s at c=1, ~29 s at c=4).")
        if engine is not None:
            print(f"The stub chat engine answered {engine.requests} requests.")
        if args.json:
            args.json.write_text(json.dumps({
                "cpus": os.cpu_count(), "trials": args.trials, "concurrencies": concurrencies, "seconds": round(took, 1),
                "warm_ups": warmups, "rows": rows}, indent=2))
    finally:
        if engine is not None:
            engine.close()
        if args.keep:
            print(f"run directories kept under {work / 'runs'}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
