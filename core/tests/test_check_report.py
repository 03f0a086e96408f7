"""The report every conformance kit returns: how one check's outcome is recorded, and how failures are listed."""

import asyncio

import pytest

from tackroom.testing import CheckResult, HarnessCheckReport, SkipCheck, VerifierCheckReport
from tackroom.testing._report import known_skips, timed_check


async def _passes() -> None:
    pass


async def _raises(exc: BaseException) -> None:
    raise exc


async def _hangs() -> None:
    await asyncio.sleep(60)


async def test_each_outcome_of_a_check_is_recorded_as_such():
    ok = await timed_check("ok", _passes(), 5)
    assert ok.passed and not ok.skipped and ok.message == ""
    skipped = await timed_check("skip", _raises(SkipCheck("cannot apply here")), 5)
    assert skipped.skipped and not skipped.passed and skipped.message == "cannot apply here"
    failed = await timed_check("assert", _raises(AssertionError("wrong score")), 5)
    assert (failed.passed, failed.skipped, failed.message) == (False, False, "wrong score")
    bare = await timed_check("bare", _raises(AssertionError()), 5)
    assert bare.message == "assertion failed"
    crashed = await timed_check("crash", _raises(KeyError("x")), 5)
    assert not crashed.passed and crashed.message == "KeyError: 'x'"
    own_timeout = await timed_check("own", _raises(TimeoutError("the judge took too long")), 5)
    assert own_timeout.message == "TimeoutError: the judge took too long"


async def test_a_check_past_its_limit_fails_saying_so_and_does_not_hang_the_suite():
    result = await timed_check("hang", _hangs(), 0.2)
    assert not result.passed and result.message == "did not finish within 0.2s"
    assert 0.2 <= result.duration_s < 5


def test_reports_name_what_they_checked_and_list_only_failures():
    results = [CheckResult(name="a", passed=True), CheckResult.skipped_because("b", "no service"),
               CheckResult(name="c", passed=False, message="score 2.0 is outside [0, 1]")]
    report = VerifierCheckReport(verifier="mine", sandbox="local", results=results)
    assert [r.name for r in report.failures] == ["c"] and [r.name for r in report.skipped] == ["b"]
    assert report.result("b").message == "no service"
    with pytest.raises(KeyError, match=r"no check 'z'.*\['a', 'b', 'c'\]"):
        report.result("z")
    with pytest.raises(AssertionError, match=r"verifier 'mine' on sandbox 'local' failed 1 conformance check\(s\):\n  - c: score 2.0"):
        report.assert_ok()
    HarnessCheckReport(harness="h", sandbox="local", results=results[:2]).assert_ok()  # a skip is no failure


def test_skipping_a_check_the_kit_does_not_have_lists_the_ones_it_has():
    assert known_skips("harness", ["b"], ["a", "b"]) == {"b"}
    with pytest.raises(ValueError, match=r"unknown harness checks \['bb'\]; known: a, b"):
        known_skips("harness", ["bb"], ["a", "b"])


def test_a_report_of_a_kit_of_your_own_names_the_plugin():
    from tackroom.testing import CheckReport

    with pytest.raises(AssertionError, match=r"^the plugin failed 1 conformance check\(s\):\n  - x: no"):
        CheckReport(results=[CheckResult(name="x", passed=False, message="no")]).assert_ok()
