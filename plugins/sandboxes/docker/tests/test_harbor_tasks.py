"""Harbor-format tasks on the docker sandbox score what they score under Harbor: what the solution installed in
/usr/bin of a merged-/usr image stays, and a server it started answers test.sh. Run the public way
(``python -m tackroom_app run``), under the oracle and the nop harness."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tackroom.testing import write_task

pytestmark = pytest.mark.docker

SERVICE = ("(setsid perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalPort => 8080, Listen => 5, "
           "ReuseAddr => 1) or die; while ($c = $s->accept) { print $c qq(42\\n); close $c }' "
           ">/dev/null 2>&1 < /dev/null &); sleep 1")


def run(tasks: Path, out: Path, harness: str) -> dict[str, dict]:
    done = subprocess.run([sys.executable, "-m", "tackroom_app", "run", str(tasks), "--sandbox", "docker", "--harness", harness,
                           "--out", str(out), "--json"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout[done.stdout.index("{"):])
    return {r["task"]: r for r in summary["trials"]}


def test_a_tool_in_usr_bin_and_a_server_the_solution_started_score_one_and_nop_scores_zero(base_image, tmp_path):
    tasks = tmp_path / "tasks"
    write_task(tasks, "mytool", solve_sh="printf '#!/bin/sh\\necho 42\\n' > /usr/bin/mytool && chmod +x /usr/bin/mytool",
               test_sh='if [ "$(mytool)" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n')
    write_task(tasks, "server", solve_sh=SERVICE,
               test_sh='if [ "$(exec 3<>/dev/tcp/127.0.0.1/8080 && head -n1 <&3)" = 42 ]; then echo 1; else echo 0; fi '
                       '> /logs/verifier/reward.txt\n')
    oracle = run(tasks, tmp_path / "runs", "oracle")
    assert {k: (r["reward"], r["error"]) for k, r in oracle.items()} == {"mytool": (1.0, None), "server": (1.0, None)}
    assert any("pid" in n and "perl: tcp 0.0.0.0:8080" in n for n in oracle["server"]["notes"]), oracle["server"]["notes"]
    nop = run(tasks, tmp_path / "runs-nop", "nop")
    assert {k: r["reward"] for k, r in nop.items()} == {"mytool": 0.0, "server": 0.0}
