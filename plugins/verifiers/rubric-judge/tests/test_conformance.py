"""rubric-judge passes the verifier conformance kit, with a scripted judge and without one."""

from __future__ import annotations

import socket

from tackroom.testing import run_verifier_checks, verifier_self_check
from tackroom_rubric_judge import RubricJudgeVerifier
from tackroom_rubric_judge.testing import evidence

FAST = {"backoff_initial_sec": 0.01, "backoff_max_sec": 0.05, "request_timeout_sec": 5.0, "max_attempts": 2}


def unreachable_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"  # closed when the socket is: nothing listens


async def test_conforms_with_a_scripted_judge(judge_server):
    # The judge passes the criterion only when the agent's work (answer and file changes) shows kit-ok.
    server = judge_server(decide=lambda prompt: "kit-ok" in evidence(prompt))
    report = await verifier_self_check(
        RubricJudgeVerifier, distribution="tackroom-rubric-judge",
        options={"base_url": server.base_url, "model": "judge", "retry": FAST},
        infra_options={"base_url": unreachable_url()},
    )
    passed = {r.name for r in report.results if r.passed}
    assert passed == {"plugin", "registered", "options", "scores_good", "scores_bad_low", "task_error",
                      "sandbox_lost", "service_down", "cancel_verify"}
    (skipped,) = report.skipped
    assert skipped.name == "planted_reward" and "does not read reward files" in skipped.message
    assert server.requests, "the judge was asked"
    prompts = [r.last_user_message for r in server.requests]
    assert any("kit-wrong" in evidence(p) for p in prompts), "the judge saw the bad episode's file change"


async def test_without_a_judge_the_grading_checks_are_skipped_with_the_reason():
    report = await verifier_self_check(
        RubricJudgeVerifier, distribution="tackroom-rubric-judge", cannot_grade="no LLM judge in this environment",
        options={"base_url": unreachable_url(), "model": "judge", "retry": FAST},
        infra_options={"base_url": unreachable_url()},
    )
    skipped = {r.name: r.message for r in report.skipped}
    assert set(skipped) == {"scores_good", "scores_bad_low", "planted_reward", "sandbox_lost", "cancel_verify"}
    assert all("no LLM judge in this environment" in m for m in skipped.values())
    assert not any(r.passed for r in report.skipped)
    assert {r.name for r in report.results if r.passed} == {"plugin", "registered", "options", "task_error",
                                                            "service_down"}


async def test_a_judge_that_always_says_yes_is_caught(judge_server):
    """The kit does not trust the judge either: a verdict that ignores the evidence fails scores_bad_low."""
    server = judge_server()
    report = await run_verifier_checks(
        RubricJudgeVerifier, options={"base_url": server.base_url, "model": "judge", "retry": FAST},
        skip={"registered", "task_error", "sandbox_lost", "service_down", "cancel_verify", "planted_reward"},
    )
    assert [r.name for r in report.failures] == ["scores_bad_low"]
    assert "top of the range" in report.failures[0].message
