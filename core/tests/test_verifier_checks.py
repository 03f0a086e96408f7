"""The verifier conformance kit: test-script passes it, and it catches verifiers that grade wrong."""

from __future__ import annotations

import inspect
import tempfile
from pathlib import Path

import pytest

import tackroom
from tackroom._builtins.test_script_verifier import REWARD_DIR, TestScriptVerifier, _read_reward
from tackroom.testing import (
    VERIFIER_CHECKS,
    VerifierScenario,
    run_verifier_checks,
    verifier_checks,
    verifier_self_check,
    write_verifier_kit_task,
)


async def test_test_script_passes_the_kit_on_local():
    report = await verifier_self_check(TestScriptVerifier, distribution="tackroom")
    assert [r.name for r in report.results] == list(VERIFIER_CHECKS)
    assert {r.name for r in report.results if r.passed} == set(VERIFIER_CHECKS) - {"service_down"}
    (skipped,) = report.skipped
    assert skipped.name == "service_down" and not skipped.passed and "no infra_options" in skipped.message


def test_every_check_says_what_it_proves():
    for name, check in verifier_checks._CHECKS.items():
        assert inspect.getdoc(check), f"check {name!r} needs a docstring saying what it proves"


class AlwaysOne(tackroom.Verifier):
    """Scores every episode 1 without looking at it."""

    name = "always-one"

    async def verify(self, task, sandbox, trajectory):
        return tackroom.Reward(score=1.0)


class OnePointFive(tackroom.Verifier):
    """Scores 1.5: outside the default reward range."""

    name = "one-point-five"

    async def verify(self, task, sandbox, trajectory):
        await sandbox.exec("true", timeout=30)
        return tackroom.Reward(score=1.5, components={"bonus": 0.5})


class TrustsTheFolder(TestScriptVerifier):
    """test-script without its first step: runs tests/test.sh but never recreates /logs/verifier empty."""

    name = "trusts-the-folder"

    async def verify(self, task, sandbox, trajectory):
        await sandbox.upload(task.tests_dir, self.options.tests_dir)
        await sandbox.exec(f"bash {self.options.tests_dir}/test.sh", timeout=task.config.verifier.timeout_sec)
        with tempfile.TemporaryDirectory() as tmp:
            await sandbox.download(REWARD_DIR, Path(tmp) / "verifier")  # the sandbox's own folder, as the agent left it
            reward = _read_reward(Path(tmp) / "verifier")
        if reward is None:
            raise tackroom.TaskError("no reward written")
        return reward


class ScoresZeroOnAnyError(TestScriptVerifier):
    """test-script that turns every failure into reward 0: a lost sandbox or a broken task trains the policy."""

    name = "scores-zero-on-any-error"

    async def verify(self, task, sandbox, trajectory):
        try:
            return await super().verify(task, sandbox, trajectory)
        except Exception:  # the mistake under test
            return tackroom.Reward(score=0.0)


NOT_REGISTERED = {"registered"}  # test doubles are not installed through an entry point


async def test_the_kit_catches_a_verifier_that_always_scores_one():
    report = await run_verifier_checks(AlwaysOne, skip=NOT_REGISTERED)
    failed = {r.name: r.message for r in report.failures}
    assert set(failed) == {"scores_bad_low", "task_error"}, failed
    assert "top of the range" in failed["scores_bad_low"]
    assert "got score 1.0" in failed["task_error"] and "TaskError" in failed["task_error"]
    skipped = {r.name: r.message for r in report.skipped}
    assert skipped == {
        "registered": "skipped by skip=",
        "planted_reward": skipped["planted_reward"],
        "sandbox_lost": "verify never calls the sandbox, so losing it cannot matter",
        "service_down": skipped["service_down"],
        "cancel_verify": "verify never calls the sandbox, so a sandbox that stops answering cannot matter",
    }
    assert not any(r.passed for r in report.skipped), "a check that cannot apply is skipped, never passed"
    with pytest.raises(AssertionError, match="failed 2 conformance check"):
        report.assert_ok()


async def test_the_kit_catches_a_reward_outside_the_range():
    report = await run_verifier_checks(OnePointFive, skip=NOT_REGISTERED)
    failed = {r.name: r.message for r in report.failures}
    assert set(failed) == {"scores_good", "scores_bad_low", "task_error"}, failed
    assert "score = 1.5, outside the task's reward range [0, 1]" in failed["scores_good"]
    assert report.result("sandbox_lost").passed  # its exec on the lost sandbox raised the sandbox's infra error


async def test_a_wider_reward_range_is_respected(tmp_path):
    """With [verifier] reward_range = [0, 2], 1.5 is a legal score; a good/bad pair shows the ordering check."""
    task = write_verifier_kit_task(tmp_path, reward_range=(0.0, 2.0))
    report = await run_verifier_checks(OnePointFive, task=task, good=VerifierScenario(expected_score=1.5),
                                       bad=VerifierScenario(), skip=NOT_REGISTERED)
    assert report.result("scores_good").passed
    assert "not below the good scenario's 1.5" in report.result("scores_bad_low").message


async def test_the_kit_catches_a_verifier_that_reads_a_planted_reward():
    report = await run_verifier_checks(TrustsTheFolder, skip=NOT_REGISTERED)
    failed = {r.name: r.message for r in report.failures}
    assert set(failed) == {"planted_reward", "task_error"}, failed
    assert "changed the bad scenario's score from 0.0 to 1.0" in failed["planted_reward"]
    assert "unclassified" in failed["task_error"]  # uploading a tests/ that is not there is not a TaskError


async def test_the_kit_catches_a_verifier_that_hides_failures_as_zero():
    report = await run_verifier_checks(ScoresZeroOnAnyError, skip=NOT_REGISTERED)
    failed = {r.name: r.message for r in report.failures}
    assert set(failed) == {"task_error", "sandbox_lost"}, failed
    assert "graded score 0.0 from a sandbox that was gone" in failed["sandbox_lost"]


async def test_skip_names_are_checked_and_skipped_checks_are_reported():
    with pytest.raises(ValueError, match="unknown verifier checks"):
        await run_verifier_checks(TestScriptVerifier, skip={"no_such_check"})
    report = await run_verifier_checks(TestScriptVerifier, skip=set(VERIFIER_CHECKS) - {"plugin"})
    assert report.result("plugin").passed
    assert len(report.skipped) == len(VERIFIER_CHECKS) - 1 and not report.failures
