"""Real Terminal-Bench 2.0 tasks under tackroom's oracle and nop, beside Harbor when it is installed.

    uv run python benchmarks/tb2_parity.py                                   # ../shared/tb2-sample, tackroom only
    uv run python benchmarks/tb2_parity.py --harbor /path/to/venv/bin/harbor # and Harbor, same tasks, same engine
    uv run python benchmarks/tb2_parity.py ~/terminal-bench-2 --force-build --include 'pypi-*' --harness oracle

Runs a folder of Harbor-format tasks (a TB2 checkout, or one task folder) through ``tackroom run`` on the
docker sandbox with ``--allow-internet`` (every TB2 ``test.sh`` installs its test tools from the internet when
grading starts, and no TB2 task declares a network policy: Harbor's default is the internet), one harness
at a time, one trial at a time. With ``--harbor`` the same tasks then run through ``harbor run -e docker``
with the same agent names. It prints per task and harness both rewards side by side, tackroom's error class
and notes where it has them, and the wall time of each trial with the ratio tackroom / Harbor (a trial's
whole life: image build or reuse, start, agent, grading, teardown). The first harness of each tool builds
the task images; the later ones reuse them, on both sides.

Harbor's docker environment gives the task container a compose project network. On an engine without a
usable bridge (``dockerd --bridge=none``; then the ``bridge`` network is absent) such a container has no
internet, so by default (``--harbor-network auto``) the script adds a compose overlay that puts the task
container, and its image build, on the host network. Parity wants the oracle 1 and nop 0 on every task
on both sides; a row that differs is marked ``<>``.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TASKS = REPO.parent / "shared" / "tb2-sample"
HARNESSES = ("oracle", "nop")
HOST_NETWORK_OVERLAY = """\
services:
  main:
    network_mode: host
    build:
      network: host
"""


def task_dirs(root: Path, include: list[str]) -> list[Path]:
    """The task folders under ``root`` (or ``root`` itself when it is one), filtered by name patterns."""
    if (root / "task.toml").is_file():
        found = [root]
    else:
        found = sorted(p for p in root.iterdir() if (p / "task.toml").is_file())
    if include:
        found = [p for p in found if any(fnmatch.fnmatch(p.name, pat) for pat in include)]
    if not found:
        sys.exit(f"no task folders (with a task.toml) under {root}" + (f" matching {include}" if include else ""))
    return found


def run_tackroom(tasks: list[Path], harness: str, out: Path, extra: list[str]) -> dict[str, dict]:
    """One ``tackroom run`` over ``tasks`` with ``harness``: per task its reward, error, notes and seconds."""
    cmd = [sys.executable, "-m", "tackroom_app", "run", *map(str, tasks), "--harness", harness, "--sandbox", "docker",
           "--concurrency", "1", "--attempts", "1", "--out", str(out), "--run-id", f"tackroom-{harness}", "--json",
           *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0 and not proc.stdout.strip().startswith("{"):
        print(f"tackroom run ({harness}) failed with exit code {proc.returncode}:\n{proc.stderr[-3000:]}",
              file=sys.stderr)
        return {}
    summary = json.loads(proc.stdout)
    rows = {}
    for trial in summary["trials"]:
        error = trial["error"]
        rows[Path(trial["task"]).name] = {
            "reward": trial["reward"],
            "error": f"{error['class']}: {error['type']}: {error['message']}" if error else None,
            "notes": trial["notes"],
            "seconds": trial["timings"].get("total"),
        }
    for failure in summary["task_load_failures"]:
        rows[Path(failure["path"]).name] = {"reward": None, "error": f"task: {failure['message']}", "notes": [],
                                            "seconds": None}
    print(f"  tackroom {harness}: {len(rows)} trials in {wall:.0f} s ({summary['run_dir']})", file=sys.stderr)
    return rows


def engine_has_bridge() -> bool:
    return subprocess.run(["docker", "network", "inspect", "bridge"], capture_output=True).returncode == 0


def run_harbor(harbor: str, tasks: list[Path], harness: str, out: Path, overlays: list[Path],
               force_build: bool) -> dict[str, dict]:
    """One ``harbor run`` job per task (a job takes one folder: a task or a dataset) with agent ``harness``."""
    rows = {}
    for task in tasks:
        job = f"harbor-{harness}-{task.name}"
        cmd = [harbor, "run", "-p", str(task), "-a", harness, "-e", "docker", "-n", "1", "-y", "-q",
               "-o", str(out), "--job-name", job, *(["--force-build"] if force_build else [])]
        for overlay in overlays:
            cmd += ["--extra-docker-compose", str(overlay)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        results = sorted((out / job).glob("*/result.json"))
        if not results:
            rows[task.name] = {"reward": None, "seconds": None,
                               "error": f"harbor run exited {proc.returncode}: {proc.stderr.strip()[-500:]}"}
            continue
        trial = json.loads(results[0].read_text())
        rewards = (trial.get("verifier_result") or {}).get("rewards") or {}
        exc = trial.get("exception_info")
        seconds = None
        if trial.get("started_at") and trial.get("finished_at"):
            seconds = (datetime.fromisoformat(trial["finished_at"]) -
                       datetime.fromisoformat(trial["started_at"])).total_seconds()
        rows[task.name] = {"reward": rewards.get("reward"), "seconds": seconds,
                           "error": f"{exc.get('exception_type')}: {exc.get('exception_message', '')[:300]}"
                           if exc else None}
    print(f"  harbor {harness}: {len(rows)} trials", file=sys.stderr)
    return rows


def fmt_reward(row: dict | None) -> str:
    if not row:
        return "-"
    return "err" if row["reward"] is None else f"{row['reward']:.2f}"


def fmt_seconds(row: dict | None) -> str:
    return "-" if not row or row.get("seconds") is None else f"{row['seconds']:.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tasks", nargs="?", type=Path, default=DEFAULT_TASKS,
                    help="a TB2 checkout (a folder of task folders) or one task folder (default: ../shared/tb2-sample)")
    ap.add_argument("--harness", action="append", choices=HARNESSES, help="oracle and/or nop (default: both)")
    ap.add_argument("--include", action="append", default=[], help="only task folders matching this pattern")
    ap.add_argument("--harbor", help="path to a Harbor install's `harbor` binary; runs the same tasks there too")
    ap.add_argument("--harbor-network", choices=("auto", "host", "default"), default="auto",
                    help="host: put Harbor's task container on the host network (auto: when the engine has no "
                         "`bridge` network)")
    ap.add_argument("--force-build", action="store_true",
                    help="build each task's environment/ even where its task.toml names a docker_image (both sides)")
    ap.add_argument("--out", type=Path, help="keep the run folders here (default: a temporary folder, removed)")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON to this file")
    args = ap.parse_args()

    tasks = task_dirs(args.tasks.resolve(), args.include)
    harnesses = args.harness or list(HARNESSES)
    out = args.out.resolve() if args.out else Path(tempfile.mkdtemp(prefix="tackroom-tb2-"))
    out.mkdir(parents=True, exist_ok=True)
    tackroom_args = ["--allow-internet", *(["--force-build"] if args.force_build else [])]

    overlays = []
    if args.harbor and (args.harbor_network == "host" or (args.harbor_network == "auto" and not engine_has_bridge())):
        overlay = out / "harbor-host-network.yaml"
        overlay.write_text(HOST_NETWORK_OVERLAY)
        overlays.append(overlay)

    try:
        rows: dict[str, dict[str, dict]] = {}
        for harness in harnesses:
            rows[f"harbor:{harness}"] = run_harbor(args.harbor, tasks, harness, out / "harbor", overlays,
                                                   args.force_build) if args.harbor else {}
            rows[f"tackroom:{harness}"] = run_tackroom(tasks, harness, out / "tackroom", tackroom_args)

        header = f"{'task':22} {'harness':7} {'tackroom':>8} {'harbor':>7} {'tr s':>6} {'hb s':>6} {'tr/hb':>6}  notes"
        print(header)
        print("-" * len(header))
        mismatches = 0
        for harness in harnesses:
            for task in tasks:
                ours = rows[f"tackroom:{harness}"].get(task.name)
                theirs = rows[f"harbor:{harness}"].get(task.name)
                ratio = "-"
                if ours and theirs and ours.get("seconds") and theirs.get("seconds"):
                    ratio = f"{ours['seconds'] / theirs['seconds']:.2f}"
                want = 1.0 if harness == "oracle" else 0.0
                differs = (ours is None or ours["reward"] != want
                           or (theirs is not None and theirs["reward"] != ours["reward"]))
                mismatches += differs
                why = []
                if ours and ours["error"]:
                    why.append(ours["error"][:160])
                if ours and differs:
                    why += [n[:160] for n in ours["notes"]]
                if theirs and theirs.get("error"):
                    why.append(f"harbor: {theirs['error'][:160]}")
                print(f"{task.name[:22]:22} {harness:7} {fmt_reward(ours):>8} {fmt_reward(theirs):>7} "
                      f"{fmt_seconds(ours):>6} {fmt_seconds(theirs):>6} {ratio:>6}  {'<> ' if differs else ''}"
                      f"{' | '.join(why)}")
        totals = {side: sum(r["seconds"] or 0 for h in harnesses for r in rows[f"{side}:{h}"].values())
                  for side in ("tackroom", "harbor")}
        print(f"\ntrial seconds in all: tackroom {totals['tackroom']:.0f}"
              + (f", Harbor {totals['harbor']:.0f} (ratio {totals['tackroom'] / totals['harbor']:.2f})"
                 if totals["harbor"] else ""))
        print(f"rows not at parity (oracle 1, nop 0, same as Harbor): {mismatches}")
        print("tr s / hb s = one trial's wall seconds (build or reuse, start, agent, grading, teardown); "
              "tr/hb = tackroom over Harbor.")
        if args.json:
            args.json.write_text(json.dumps(rows, indent=2))
    finally:
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
