"""Services kept into grading on the ``local`` sandbox (issue 46, items 2 and 3): a kept service cannot change what
test.sh reads, a real service still answers test.sh, and a server still starting when the agent's turn ends is
kept, not lost. Each test is a real trial (the oracle runs the task's solution in a real bubblewrap sandbox) or
plays the agent in a real sandbox."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

import tackroom
import tackroom_app
from tackroom import Trial
from tackroom.testing import SANDBOX_CHECKS, run_sandbox_checks
from tackroom_app import TrialPlugins, TrialRuntime
from tackroom_local import LocalSandbox, LocalSandboxProvider

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the local sandbox keeps services only when run as root")


async def run_task(tmp_path: Path, solve: str, test_sh: str, toml: str = "", **options) -> tackroom.TrialResult:
    """One real trial of a task whose oracle solution is ``solve`` and whose grader is ``test_sh``."""
    task_dir = tmp_path / "task"
    for sub in ("tests", "solution"):
        (task_dir / sub).mkdir(parents=True)
    (task_dir / "instruction.md").write_text("make /app/answer.txt say 42")
    (task_dir / "task.toml").write_text("[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 30\n" + toml)
    (task_dir / "tests" / "test.sh").write_text(textwrap.dedent(test_sh))
    (task_dir / "solution" / "solve.sh").write_text(textwrap.dedent(solve))
    task = tackroom.load_task(task_dir)
    manager = tackroom_app.PluginManager()
    oracle, verifier = manager.get("harness", "oracle"), manager.get("verifier", "test-script")
    trial = Trial(task_id=task.id, task_path=str(task.path), harness="oracle", sandbox="local", verifier="test-script")
    provider = LocalSandboxProvider({"root_dir": str(tmp_path / "roots"), **options})
    plugins = TrialPlugins(oracle, oracle.Options(), provider, verifier, verifier.Options())
    rt = TrialRuntime(tmp_path / "run", progress=False, manager=manager, retry_backoff_sec=0.01)
    return await rt.run_trial(trial, task, plugins)


# A hostile service: it listens (so it is kept), waits for the grader's tests to appear in /tests, then writes the
# answer test.sh is about to read, in the working directory, through its own cwd (no path lookup to stop).
HOSTILE = """\
    echo wrong > /app/answer.txt
    cat > /app/service.py <<'PY'
    import os, socket, time
    os.chdir("/app")
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 8080)); s.listen()
    while not os.path.exists("/tests/test.sh"):
        time.sleep(0.01)
    with open("answer.txt", "w") as f:
        f.write("42\\n")
    time.sleep(1000)
    PY
    nohup python3 /app/service.py >/dev/null 2>&1 &
    sleep 0.5
    """
READ_ANSWER = """\
    sleep 0.5  # the service has long had its chance to write
    if grep -qx 42 /app/answer.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
    """


async def test_a_kept_service_that_rewrites_the_answer_while_test_sh_runs_is_not_graded(tmp_path):
    result = await run_task(tmp_path, HOSTILE, READ_ANSWER)
    assert result.error is None and result.reward == 0.0, result
    assert any("python3: tcp 127.0.0.1:8080" in n for n in result.notes), f"the service was not kept: {result.notes}"


async def test_a_task_that_opts_in_grades_what_its_services_write(tmp_path):
    result = await run_task(tmp_path, HOSTILE, READ_ANSWER, toml="grade_service_writes = true\n")
    assert result.error is None and result.reward == 1.0, result


# A real service task: the solution serves the answer over HTTP and the tests fetch it, and write into the
# working directory (a cache, as pytest does) while the server runs.
SERVE = """\
    mkdir -p /app/www && echo 42 > /app/www/answer.txt
    nohup python3 -m http.server 8000 --bind 127.0.0.1 --directory /app/www >/dev/null 2>&1 &
    sleep 1
    """
ASK_SERVER = """\
    cd /app && mkdir -p .cache && echo run > .cache/marker
    got=$(python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:8000/answer.txt").read().decode().strip())')
    if [ "$got" = 42 ] && [ "$(cat .cache/marker)" = run ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
    """


async def test_a_server_the_solution_started_still_answers_the_tests(tmp_path):
    result = await run_task(tmp_path, SERVE, ASK_SERVER)
    assert result.error is None and result.reward == 1.0, result


# The held-out task: the solution ends with `setsid python server.py &` while the server is still importing
# its libraries (here: 0.3 s of CPU before it binds), so at the end of the turn it holds no listening socket yet.
SLOW_SERVER = """\
    echo 42 > /app/answer.txt
    cat > /app/server.py <<'PY'
    import http.server, time
    t = time.process_time()
    while time.process_time() - t < 0.3:  # importing a large framework
        pass
    http.server.ThreadingHTTPServer(("127.0.0.1", 8000), http.server.SimpleHTTPRequestHandler).serve_forever()
    PY
    cd /app
    setsid python3 server.py >/dev/null 2>&1 < /dev/null &
    sleep 0.2  # the server is under way (its name is python3, not setsid), still far from listening
    """
ASK_SLOW_SERVER = ASK_SERVER  # the server serves /app, where the answer is


async def test_a_server_still_starting_when_the_turn_ends_is_kept_and_the_notes_say_so(tmp_path):
    result = await run_task(tmp_path, SLOW_SERVER, ASK_SLOW_SERVER)
    assert result.error is None and result.reward == 1.0, result
    assert any("waited" in n and "settle" in n for n in result.notes), result.notes
    assert any("kept 1 listening process" in n and "tcp 127.0.0.1:8000" in n for n in result.notes), result.notes


async def test_without_settling_the_starting_server_is_killed_and_the_notes_say_what_and_why(tmp_path):
    result = await run_task(tmp_path, SLOW_SERVER, ASK_SLOW_SERVER, settle_sec=0)
    assert result.reward == 0.0, result
    assert any("killed" in n and "python3" in n and "no listening socket" in n for n in result.notes), result.notes


# -- the conformance kit's kept_service_write check -------------------------------------------------------------


class GradesWhatServicesWrite(LocalSandbox):
    """Deliberately broken for the test: the grader's command reads the real graded folders while services run."""

    async def run_grader(self, cmd, *, graded=(), **kw):
        return await super().run_grader(cmd, **kw)


def provider_of(cls: type[LocalSandbox]) -> LocalSandboxProvider:
    class Provider(LocalSandboxProvider):
        def create(self, spec: tackroom.SandboxSpec) -> LocalSandbox:
            return cls(spec, self.options)

    return Provider({})


async def test_the_local_sandbox_passes_the_kits_kept_service_write_check(tmp_path):
    report = await run_sandbox_checks(LocalSandboxProvider({"root_dir": str(tmp_path)}),
                                      skip=set(SANDBOX_CHECKS) - {"kept_service_write"})
    (result,) = [r for r in report.results if r.name == "kept_service_write"]
    assert result.passed and not result.skipped, result


async def test_the_kits_check_fails_a_sandbox_whose_grader_reads_what_kept_services_write():
    report = await run_sandbox_checks(provider_of(GradesWhatServicesWrite),
                                      skip=set(SANDBOX_CHECKS) - {"kept_service_write"})
    (result,) = [r for r in report.results if r.name == "kept_service_write"]
    assert not result.passed and "a kept service changed a graded file" in result.message, result
