"""Attacks on grading (issue 28): an agent that cannot solve its task tries to bend the grade instead.

Each test is a real trial whose "solution" (run by the oracle harness) is the attack, on the ``local``
sandbox and, where a Docker engine answers, on ``docker``. The task's test.sh passes only when
/app/answer.txt says 42, and the attack never writes 42: every attack must end with reward 0 (and, for
sabotage, a ``model`` error), never 1 and never a dropped (``task``) trial. The other side is tested too:
a grader broken on its own stays a ``task`` error.
"""

from __future__ import annotations

import shlex
import subprocess
import uuid

import pytest

import tackroom
import tackroom.testing
import tackroom_app
from tackroom._builtins.nop_harness import NopHarness
from tackroom._builtins.oracle_harness import OracleHarness
from tackroom._builtins.test_script_verifier import TestScriptVerifier
from tackroom._runtime import TrialPlugins, TrialRuntime
from tackroom._trial import Trial
from tackroom_local import LocalSandboxProvider

CHECK = 'if [ "$(cat /app/answer.txt 2>/dev/null)" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'
"""test.sh: reward 1 only for the right answer."""


def _docker_problem() -> str | None:
    try:
        out = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=20)
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        return f"no Docker engine ({exc})"
    return None if out.returncode == 0 else f"the Docker engine is unreachable: {out.stderr.strip()[:200]}"


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def sandbox_name(request) -> str:
    if request.param == "docker" and (problem := _docker_problem()):
        tackroom.testing.skip_or_fail(problem)
    return request.param


def provider_for(name: str, tmp_path):
    if name == "local":
        return LocalSandboxProvider({"root_dir": str(tmp_path / "roots")})
    from tackroom_docker import DockerProvider

    return DockerProvider()


async def trial(tmp_path, sandbox: str, *, test_sh: str = CHECK, solve_sh: str = "true", toml_extra: str = "",
                harness=OracleHarness, verifier_timeout: float = 20, files: dict | None = None) -> tackroom.TrialResult:
    name = f"t-{uuid.uuid4().hex[:6]}"
    toml = f"[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = {verifier_timeout}\n{toml_extra}"
    task = tackroom.load_task(tackroom.testing.write_task(tmp_path / "tasks", name, test_sh=test_sh, solve_sh=solve_sh,
                                                          toml=toml, files=files))
    plugins = TrialPlugins(harness, harness.Options(), provider_for(sandbox, tmp_path),
                           TestScriptVerifier, TestScriptVerifier.Options())
    rt = TrialRuntime(tmp_path / f"run-{name}", progress=False, manager=tackroom_app.PluginManager(), retry_backoff_sec=0.01,
                      attempts=1)
    t = Trial(task_id=task.id, task_path=str(task.path), harness=harness.name, sandbox=sandbox, verifier="test-script")
    return await rt.run_trial(t, task, plugins)


# -- item 1: /tests holds exactly the task's files --------------------------------------------------


async def test_a_test_file_the_agent_planted_in_tests_is_gone_before_grading(tmp_path, sandbox_name):
    # test.sh sources every helper in /tests/helpers: a planted one would set the reward.
    test_sh = "for f in /tests/helpers/*.sh; do . \"$f\"; done\n" + CHECK + "[ -n \"$PLANTED\" ] && echo 1 > /logs/verifier/reward.txt\ntrue\n"
    solve = ("mkdir -p /tests/helpers; echo 'PLANTED=1' > /tests/helpers/conftest.sh; "
             "echo 'import pytest' > /tests/conftest.py; echo wrong > /app/answer.txt")
    result = await trial(tmp_path, sandbox_name, test_sh=test_sh, solve_sh=solve,
                         files={"tests/helpers/real.sh": "true\n"})
    assert result.error is None, result.error
    assert result.reward == 0.0, "a file the agent planted in /tests steered grading"


# -- item 2: the image's own tools ----------------------------------------------------------------


TAMPER = r"""
fake='#!/bin/sh
exit 0'
for d in /usr/local/bin /usr/bin /bin; do
    printf '%s\n' "$fake" > "$d/grep.new" 2>/dev/null && chmod +x "$d/grep.new" && mv -f "$d/grep.new" "$d/grep" 2>/dev/null
done
echo wrong > /app/answer.txt
"""
GREP_CHECK = 'if grep -qx 42 /app/answer.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'


async def test_tools_the_agent_replaced_do_not_grade_it(tmp_path, sandbox_name):
    result = await trial(tmp_path, sandbox_name, test_sh=GREP_CHECK, solve_sh=TAMPER)
    assert result.error is None, result.error
    assert result.reward == 0.0, "test.sh ran the agent's grep"
    if sandbox_name == "docker":
        assert any("restored the image's tools" in n and "grep" in n for n in result.notes), result.notes


async def test_the_same_task_still_scores_one_for_a_real_solution(tmp_path, sandbox_name):
    result = await trial(tmp_path, sandbox_name, test_sh=GREP_CHECK, solve_sh="echo 42 > /app/answer.txt")
    assert (result.error, result.reward) == (None, 1.0)
    assert not any("restored" in n for n in result.notes), result.notes


async def test_local_usr_stays_read_only_so_there_is_nothing_to_restore(tmp_path):
    result = await trial(tmp_path, "local", test_sh=CHECK + "touch /usr/bin/tackroom-probe && echo 1 > /logs/verifier/reward.txt; true\n",
                         solve_sh="touch /usr/bin/tackroom-probe && echo 42 > /app/answer.txt")
    assert result.reward == 0.0 and result.error is None, "local's /usr was writable"


async def test_separate_grading_sees_the_agents_files_and_not_its_tools(tmp_path, sandbox_name):
    extra = 'grading = "separate"\ngrading_paths = ["/data"]\n'
    test_sh = 'if grep -qx 42 /app/answer.txt && [ -f /data/x ] && [ ! -e /tmp/left ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'
    solved = await trial(tmp_path, sandbox_name, test_sh=test_sh, toml_extra=extra,
                         solve_sh="mkdir -p /data && touch /data/x /tmp/left && echo 42 > /app/answer.txt")
    assert (solved.error, solved.reward) == (None, 1.0), solved.notes
    assert any("separate" in n and "/data" in n for n in solved.notes), solved.notes
    tampered = await trial(tmp_path, sandbox_name, test_sh=GREP_CHECK, toml_extra=extra, solve_sh=TAMPER)
    assert (tampered.error, tampered.reward) == (None, 0.0)


# -- item 3: sabotaged grading is the model's failure ------------------------------------------------


async def test_a_fifo_where_the_verifier_reads_is_the_models_failure(tmp_path, sandbox_name):
    result = await trial(tmp_path, sandbox_name, solve_sh="rm -f /app/answer.txt; mkfifo /app/answer.txt")
    assert result.reward == 0.0
    assert result.error is not None and result.error.error_class == "model", result.error
    assert result.error.type == "GradingSabotagedError" and "/app/answer.txt" in result.error.message
    assert result.timings["verify"] < 15, "grading waited on the FIFO"


async def test_a_grader_that_times_out_only_on_the_agents_files_is_the_models_failure(tmp_path, sandbox_name):
    # The agent planted a file that sends test.sh into a loop (its own solution "hangs" the checker).
    test_sh = 'while [ -f /app/hang ]; do sleep 0.2; done\n' + CHECK
    result = await trial(tmp_path, sandbox_name, test_sh=test_sh, solve_sh="touch /app/hang", verifier_timeout=3)
    assert result.reward == 0.0
    assert result.error is not None and result.error.error_class == "model", result.error
    assert result.error.type == "GradingSabotagedError"
    assert any("untouched environment" in n for n in result.notes), result.notes


async def test_a_grader_broken_on_its_own_stays_a_task_error(tmp_path, sandbox_name):
    for test_sh, timeout in (("sleep 30\n" + CHECK, 2), ("if then fi (\n", 20)):
        result = await trial(tmp_path, sandbox_name, test_sh=test_sh, solve_sh="echo 42 > /app/answer.txt",
                             verifier_timeout=timeout)
        assert result.error is not None and result.error.error_class == "task", (test_sh, result.error)
        assert result.error.type == "GraderBrokenError" and "no agent touched" in result.error.message
        assert result.reward is None


async def test_a_nop_agent_is_graded_zero_not_sabotage(tmp_path, sandbox_name):
    result = await trial(tmp_path, sandbox_name, harness=NopHarness)
    assert (result.error, result.reward) == (None, 0.0)


# -- item 6: the harness is told the time left ------------------------------------------------------


async def test_the_harness_gets_the_agent_deadline_on_its_task(tmp_path):
    seen: list[float | None] = []

    class Clock(NopHarness):
        name = "clock"

        async def run(self, task, sandbox, policy):
            seen.append(task.time_left())
            return await super().run(task, sandbox, policy)

    await trial(tmp_path, "local", harness=Clock)
    assert seen and seen[0] is not None and 25 < seen[0] <= 30


# -- item 4: storage_mb ---------------------------------------------------------------------------


async def test_writing_past_storage_mb_fails_inside_and_the_trial_is_still_graded(tmp_path, sandbox_name):
    solve = ("dd if=/dev/zero of=/app/fill bs=1M count=300 2>/tmp/dd.err; dd if=/dev/zero of=/tmp/fill bs=1M count=300 2>>/tmp/dd.err; "
             "grep -q 'No space left' /tmp/dd.err || grep -q 'No space left' /app/dd.err; "
             "if grep -q 'No space left' /tmp/dd.err; then rm -f /app/fill; echo 42 > /app/answer.txt; fi")
    result = await trial(tmp_path, sandbox_name, solve_sh=solve, toml_extra="[environment]\nstorage_mb = 64\n")
    assert (result.error, result.reward) == (None, 1.0), (result.error, result.notes)


# -- the grader's own run: the reward channel, start-up hooks, services, exhaustion ----------------------------------


@pytest.mark.parametrize("test_sh", [CHECK, "true\n"], ids=["writes-0", "writes-nothing"])
async def test_a_reward_the_agent_prefilled_and_locked_is_never_read(tmp_path, sandbox_name, test_sh):
    lock = ("mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; echo '{\"reward\": 1}' > /logs/verifier/reward.json; "
            "chmod 444 /logs/verifier/reward.*; chattr +i /logs/verifier/reward.* 2>/dev/null; chmod 555 /logs/verifier; "
            "chattr +i /logs/verifier 2>/dev/null; echo wrong > /app/answer.txt; true")
    result = await trial(tmp_path, sandbox_name, test_sh=test_sh, solve_sh=lock)
    assert result.reward != 1.0, "the agent's prefilled reward was read"
    assert result.error is None or result.error.error_class in ("model", "task"), result.error


async def test_a_service_the_agent_left_cannot_rewrite_the_reward_while_test_sh_runs(tmp_path, sandbox_name):
    # A listening perl service (kept into grading where the sandbox keeps services) that keeps writing 1 as the reward.
    service = ("use IO::Socket::INET; my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 18765, "
               "Listen => 5, ReuseAddr => 1) or die; $s->timeout(0.01); while (1) { mkdir '/logs/verifier'; "
               "if (open(my $h, '>', '/logs/verifier/reward.txt')) { print $h \"1\\n\"; close($h); } my $c = $s->accept; "
               "if ($c) { print $c \"hi\\n\"; close($c); } }")
    solve = f"echo wrong > /app/answer.txt; (perl -e {shlex.quote(service)} >/dev/null 2>&1 &); sleep 0.5"
    test_sh = CHECK + "sleep 1\n(exec 3<>/dev/tcp/127.0.0.1/18765 && head -n1 <&3) 2>/dev/null; sleep 0.5\n"
    result = await trial(tmp_path, sandbox_name, test_sh=test_sh, solve_sh=solve)
    assert result.reward == 0.0 and result.error is None, (result.reward, result.error)


async def test_a_perl_module_the_agent_put_first_in_inc_does_not_run_in_grading(tmp_path, sandbox_name):
    # /etc/perl comes first in Debian's @INC: a strict.pm there would run inside every grader's `use strict`.
    shadow = "package strict; open(my $h, '>', '/logs/verifier/reward.txt'); print $h \"1\\n\"; close($h); sub import {} 1;"
    solve = (f"echo wrong > /app/answer.txt; for d in $(perl -e 'print join(\" \", @INC)'); do "
             f"mkdir -p \"$d\" 2>/dev/null && printf '%s' {shlex.quote(shadow)} > \"$d/strict.pm\" 2>/dev/null; done; true")
    test_sh = CHECK + "perl -e 'use strict; 1' >/dev/null 2>&1; true\n"
    result = await trial(tmp_path, sandbox_name, test_sh=test_sh, solve_sh=solve)
    assert result.reward == 0.0, f"the agent's strict.pm ran inside grading (reward {result.reward}, {result.error})"


async def test_a_fork_bomb_at_the_end_of_the_turn_is_the_models_zero_never_infra(tmp_path, sandbox_name):
    bomb = "echo wrong > /app/answer.txt; (b() { b | b & }; b) >/dev/null 2>&1 & sleep 3; true"
    result = await trial(tmp_path, sandbox_name, solve_sh=bomb, toml_extra="[environment]\nmemory_mb = 1024\n")
    assert result.reward == 0.0, (result.reward, result.error)
    assert result.error is None or result.error.error_class == "model", result.error
