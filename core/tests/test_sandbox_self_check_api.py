"""The sandbox conformance suite's own API (running it needs a provider: see each provider's tests)."""

import pytest

from tackroom.testing import SANDBOX_CHECKS, CheckResult, SandboxCheckReport, run_sandbox_checks
from tackroom.testing.sandbox_checks import CHECKS


def test_the_suite_covers_what_every_provider_must_do():
    assert {
        "exec_cwd", "exec_env", "exec_stdin", "exec_timeout", "exit_codes", "large_output", "binary_round_trip",
        "directory_transfer", "path_traversal", "missing_download", "snapshot", "no_network", "host_port_forward",
        "stop_idempotent", "stop_never_started",
    } <= set(SANDBOX_CHECKS)  # fmt: skip
    assert all(check.__doc__ for check in CHECKS.values()), "each check's docstring says what it proves"


def test_a_report_with_failures_names_each_check_and_its_reason():
    report = SandboxCheckReport(
        provider="mine",
        results=[
            CheckResult(name="exec_timeout", passed=False, message="took 30.0s to fire"),
            CheckResult(name="exit_codes", passed=True),
            CheckResult(name="no_network", passed=False, message="interfaces besides lo: ['eth0']"),
        ],
        timings={},
    )
    assert [r.name for r in report.failures] == ["exec_timeout", "no_network"]
    with pytest.raises(AssertionError) as caught:
        report.assert_ok()
    message = str(caught.value)
    assert "'mine' failed 2 conformance check(s)" in message
    assert "exec_timeout: took 30.0s to fire" in message and "no_network: interfaces besides lo" in message


def test_a_passing_report_asserts_quietly():
    SandboxCheckReport(provider="mine", results=[CheckResult(name="exit_codes", passed=True)], timings={}).assert_ok()


async def test_skipping_an_unknown_check_is_an_error():
    with pytest.raises(ValueError, match="unknown sandbox checks"):
        await run_sandbox_checks(provider=None, skip={"exec_timeuot"})  # type: ignore[arg-type]
