"""Services kept into grading on the ``docker`` sandbox (issue 46, items 2 and 3): a kept service cannot change what
test.sh reads, a real service still answers test.sh, and a server still starting when the agent's turn ends is
kept, not lost. Each test is a real trial: the oracle runs the task's solution in a real container of the offline
base image (perl and bash, no python), the test-script verifier grades it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import tackroom
import tackroom_app
from tackroom import Trial
from tackroom.testing import SANDBOX_CHECKS, run_sandbox_checks
from tackroom_app import TrialPlugins, TrialRuntime
from tackroom_docker import DockerProvider

pytestmark = pytest.mark.docker


async def run_task(tmp_path: Path, solve: str, test_sh: str, toml: str = "", **options) -> tackroom.TrialResult:
    """One real trial of a task whose oracle solution is ``solve`` and whose grader is ``test_sh``."""
    task_dir = tmp_path / "task"
    for sub in ("tests", "solution"):
        (task_dir / sub).mkdir(parents=True)
    (task_dir / "instruction.md").write_text("make /app/answer.txt say 42")
    (task_dir / "task.toml").write_text("[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n" + toml)
    (task_dir / "tests" / "test.sh").write_text(textwrap.dedent(test_sh))
    (task_dir / "solution" / "solve.sh").write_text(textwrap.dedent(solve))
    task = tackroom.load_task(task_dir)
    manager = tackroom_app.PluginManager()
    oracle, verifier = manager.get("harness", "oracle"), manager.get("verifier", "test-script")
    trial = Trial(task_id=task.id, task_path=str(task.path), harness="oracle", sandbox="docker", verifier="test-script")
    plugins = TrialPlugins(oracle, oracle.Options(), DockerProvider(options), verifier, verifier.Options())
    rt = TrialRuntime(tmp_path / "run", progress=False, manager=manager, retry_backoff_sec=0.01)
    return await rt.run_trial(trial, task, plugins)


# A hostile service: it listens (so it is kept), waits for the grader's tests to appear in /tests, then writes the
# answer test.sh is about to read, through its own working directory (no path lookup a mount could stop).
HOSTILE = """\
    mkdir -p /app && cd /app && echo wrong > answer.txt
    setsid perl -MIO::Socket::INET -e '
        $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 8080, Listen => 5, ReuseAddr => 1) or die;
        select(undef, undef, undef, 0.01) until -e "/tests/test.sh";
        open(my $f, ">", "answer.txt"); print $f "42\\n"; close($f);
        sleep 1000' >/dev/null 2>&1 < /dev/null &
    sleep 1
    """
READ_ANSWER = """\
    sleep 0.5  # the service has long had its chance to write
    if grep -qx 42 /app/answer.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
    """


async def test_a_kept_service_that_rewrites_the_answer_while_test_sh_runs_is_not_graded(base_image, tmp_path):
    result = await run_task(tmp_path, HOSTILE, READ_ANSWER)
    assert result.error is None and result.reward == 0.0, result
    assert any("perl: tcp 127.0.0.1:8080" in n for n in result.notes), f"the service was not kept: {result.notes}"


async def test_a_task_that_opts_in_grades_what_its_services_write(base_image, tmp_path):
    result = await run_task(tmp_path, HOSTILE, READ_ANSWER, toml="grade_service_writes = true\n")
    assert result.error is None and result.reward == 1.0, result


# A server the tests query (perl, as the slim image has no python), started by a solution that ends while it is
# still starting up: 0.3 s of CPU (a large framework importing) before it binds. test.sh also writes into the
# working directory while the server runs (a cache, as pytest does).
SLOW_SERVER = """\
    mkdir -p /app && cd /app && echo 42 > answer.txt
    setsid perl -MIO::Socket::INET -e '
        1 while (times)[0] < 0.3;
        $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 8080, Listen => 5, ReuseAddr => 1) or die;
        while ($c = $s->accept) { open(my $f, "<", "/app/answer.txt"); print $c scalar(<$f>); close $c }
        ' >/dev/null 2>&1 < /dev/null &
    sleep 0.2  # the server is under way (its name is perl, not setsid), still far from listening
    """
ASK_SERVER = """\
    cd /app && mkdir -p .cache && echo run > .cache/marker
    exec 3<>/dev/tcp/127.0.0.1/8080 && read -r got <&3
    if [ "$got" = 42 ] && [ "$(cat .cache/marker)" = run ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
    """


async def test_a_server_still_starting_when_the_turn_ends_is_kept_and_answers_the_tests(base_image, tmp_path):
    result = await run_task(tmp_path, SLOW_SERVER, ASK_SERVER)
    assert result.error is None and result.reward == 1.0, result
    assert any("waited" in n and "settle" in n for n in result.notes), result.notes
    assert any("kept 1 listening process" in n and "perl: tcp 127.0.0.1:8080" in n for n in result.notes), result.notes


async def test_without_settling_the_starting_server_is_killed_and_the_notes_say_what_and_why(base_image, tmp_path):
    result = await run_task(tmp_path, SLOW_SERVER, ASK_SERVER, settle_sec=0)
    assert result.reward == 0.0, result
    assert any("killed" in n and "perl" in n and "no listening socket" in n for n in result.notes), result.notes


async def test_the_docker_sandbox_passes_the_kits_kept_service_write_check(provider):
    report = await run_sandbox_checks(provider, skip=set(SANDBOX_CHECKS) - {"kept_service_write"})
    (result,) = [r for r in report.results if r.name == "kept_service_write"]
    assert result.passed and not result.skipped, result
