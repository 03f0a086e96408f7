"""The suite's parallel schedule holds: a module's tests share a worker, and so does a cross-module group.

pytest-xdist's ``--dist loadgroup`` reads the ``xdist_group`` mark (the root conftest.py adds one to every test)
into the node id as ``path::test@group``. With pytest 9.2 and xdist 3.8 that suffix was silently never written,
so every test was handed out on its own: module fixtures were built once per worker, two shared Tinker servers
ran at once and one worker's ``sandbox cleanup`` removed another's leaked container. This runs a small real
session on two workers and reads who ran what.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# a module of the `docker` group (the app's `sandbox` command tests: no Docker needed) and an ordinary module
DOCKER_GROUP_MODULE = "packages/app/tests/test_sandbox_cmd.py"
PLAIN_MODULE = "packages/train/tests/test_mismatch_threshold.py"


def test_a_module_and_the_docker_group_each_run_on_one_worker() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-v", "-p", "no:cacheprovider", DOCKER_GROUP_MODULE, PLAIN_MODULE],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    passed = re.findall(r"^\[(gw\d+)\] \[ *\d+%\] PASSED (\S+)", done.stdout, re.M)
    assert len(passed) >= 8, done.stdout[-3000:]
    workers: dict[str, set[str]] = defaultdict(set)
    for worker, nodeid in passed:
        group = nodeid.partition("@")[2]
        assert group, f"{nodeid}: no xdist group in the node id, so --dist loadgroup hands it out alone"
        workers[group].add(worker)
    assert set(workers) == {"docker", PLAIN_MODULE}, dict(workers)
    assert all(len(w) == 1 for w in workers.values()), f"a group ran on more than one worker: {dict(workers)}"
