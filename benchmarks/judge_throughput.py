"""Rubric-judge throughput: N criteria x M trials at judge concurrency C.

    # against the local engine (vLLM serving SmolLM2-135M-Instruct)
    uv run python benchmarks/judge_throughput.py --url $TACKROOM_ENGINE_URL -n 4 -m 8 -c 1 -c 4 -c 16
    # against MisbehavingJudgeServerForTests, 30% of requests failing (429/500/503/hang/bad JSON)
    uv run python benchmarks/judge_throughput.py --misbehaving --fault-rate 0.3 -n 8 -m 50 -c 8 -c 64

All M trials run at once, each a fresh ``rubric-judge`` verifier (as the runtime
makes them) sharing the process's judge client, so C is the number of judge
requests in flight. For each C it prints verdicts/s, latency per verdict
(mean, p95, including queueing and retries), attempts, retries by reason and
re-asks. Verdicts are structured (response_format json_schema).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import tackroom
from tackroom_rubric_judge import RubricJudgeVerifier, close_shared_clients, shared_clients
from tackroom_rubric_judge.testing import MisbehavingJudgeServerForTests

ANSWER = tackroom.Trajectory(final_answer=(
    "I read /app/sales.csv, summed the amounts per region (north 15, south 7) and wrote them to "
    "/app/out/totals.csv with a header row. I did not modify the input file."
))
CRITERIA = [
    "The answer reports a total for the north region.",
    "The answer reports a total for the south region.",
    "The agent says where it wrote the totals.",
    "The answer says the input file was left unchanged.",
    "The totals are sorted by region name.",
    "The answer mentions a header row.",
    "The answer is at most three sentences long.",
    "The answer names the input file.",
]
FAULTS = ["429", "500", "503", "hang", "bad_json"]


def make_tasks(root: Path, trials: int, criteria: int) -> list[tackroom.Task]:
    tasks = []
    for t in range(trials):
        d = root / f"task-{t:03d}"
        d.mkdir(parents=True)
        (d / "instruction.md").write_text("Sum /app/sales.csv per region into /app/out/totals.csv and report.\n")
        rubric = [{"id": f"c{i}", "criterion": CRITERIA[i % len(CRITERIA)]} for i in range(criteria)]
        (d / "rubric.json").write_text(json.dumps(rubric))
        tasks.append(tackroom.load_task(d))
    return tasks


async def run_once(options: dict, tasks: list[tackroom.Task]) -> dict:
    await close_shared_clients()  # fresh client: its own semaphore and counters
    started = time.perf_counter()
    rewards = await asyncio.gather(*(RubricJudgeVerifier(options).verify(t, None, ANSWER) for t in tasks),
                                   return_exceptions=True)
    wall = time.perf_counter() - started
    failed = [r for r in rewards if isinstance(r, BaseException)]
    ok = [r for r in rewards if not isinstance(r, BaseException)]
    latencies = [c["call"]["latency_s"] for r in ok for c in r.details["criteria"]]
    (client,) = shared_clients()
    stats = client.stats
    verdicts = len(latencies)
    return {
        "concurrency": options["max_concurrency"],
        "trials": len(tasks),
        "verdicts": verdicts,
        "failed_trials": len(failed),
        "errors": sorted({type(e).__name__ for e in failed}),
        "first_error": str(failed[0])[:300] if failed else None,
        "wall_s": round(wall, 2),
        "verdicts_per_s": round(verdicts / wall, 2) if wall else 0.0,
        "latency_mean_s": round(statistics.mean(latencies), 3) if latencies else None,
        "latency_p95_s": round(statistics.quantiles(latencies, n=20)[-1], 3) if len(latencies) > 1 else None,
        "attempts": stats.attempts,
        "retries": dict(sorted(stats.retries.items())),
        "reasks": stats.reasks,
        "max_in_flight": stats.max_in_flight,
        "passed_share": round(sum(c["passed"] for r in ok for c in r.details["criteria"]) / verdicts, 3)
        if verdicts else None,
    }


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=os.environ.get("TACKROOM_ENGINE_URL"),
                        help="OpenAI-compatible judge base URL (default $TACKROOM_ENGINE_URL)")
    parser.add_argument("--model", default=None, help="judge model (default: the first one the endpoint serves)")
    parser.add_argument("--misbehaving", action="store_true", help="use MisbehavingJudgeServerForTests instead")
    parser.add_argument("--fault-rate", type=float, default=0.0, help="misbehaving: share of requests that fail")
    parser.add_argument("--slow-sec", type=float, default=0.05, help="misbehaving: service time of a good reply")
    parser.add_argument("-n", "--criteria", type=int, default=4)
    parser.add_argument("-m", "--trials", type=int, default=8)
    parser.add_argument("-c", "--concurrency", type=int, action="append", help="repeatable (default 1, 4, 16)")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--timeout", type=float, default=120.0, help="per-request timeout (s)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    levels = args.concurrency or [1, 4, 16]

    server = None
    if args.misbehaving:
        rng = random.Random(0)
        total = args.criteria * args.trials * len(levels) * 4
        script = [rng.choice(FAULTS) if rng.random() < args.fault_rate else "slow" for _ in range(total)]
        server = MisbehavingJudgeServerForTests(script=script, default="slow", slow_sec=args.slow_sec).start()
        url, timeout = server.base_url, 10.0
    elif args.url:
        url, timeout = args.url, args.timeout
    else:
        print("no judge: pass --url (or set TACKROOM_ENGINE_URL), or --misbehaving", file=sys.stderr)
        return 2

    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="tackroom-judge-bench-") as tmp:
            tasks = make_tasks(Path(tmp), args.trials, args.criteria)
            for c in levels:
                options = {
                    "base_url": url, "max_concurrency": c, "max_tokens": args.max_tokens,
                    "retry": {"request_timeout_sec": timeout, "backoff_initial_sec": 0.05 if server else 0.5,
                              "backoff_max_sec": 1.0 if server else 10.0, "max_attempts": 8},
                }
                if args.model:
                    options["model"] = args.model
                rows.append(await run_once(options, tasks))
                if not args.json:
                    r = rows[-1]
                    print(f"C={r['concurrency']:>3}  {r['verdicts']:>4} verdicts in {r['wall_s']:>7.2f}s  "
                          f"{r['verdicts_per_s']:>7.2f} verdicts/s  latency mean {r['latency_mean_s']}s "
                          f"p95 {r['latency_p95_s']}s  attempts {r['attempts']}  retries {r['retries']}  "
                          f"reasks {r['reasks']}  in-flight max {r['max_in_flight']}  failed trials "
                          f"{r['failed_trials']} {r['errors'] or ''}", flush=True)
                    if r["first_error"]:
                        print(f"       first error: {r['first_error']}", flush=True)
        await close_shared_clients()
    finally:
        if server is not None:
            server.stop()
    summary = {"judge": "misbehaving" if server else url, "criteria": args.criteria, "trials": args.trials,
               "fault_rate": args.fault_rate if server else None, "runs": rows}
    if args.json:
        print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
