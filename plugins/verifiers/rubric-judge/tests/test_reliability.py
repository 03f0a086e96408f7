"""Retries, backoff, key rotation, re-asks, timeouts and the final classification, against a judge that misbehaves."""

from __future__ import annotations

import asyncio
import time

import pytest

import tackroom
import tackroom_app
from tackroom import Trial
from tackroom_app import TrialPlugins, TrialRuntime
from tackroom_rubric_judge import (
    JudgeAuthError,
    JudgeBadRequestError,
    JudgeContextTooLongError,
    JudgeInvalidOutputError,
    JudgeUnavailableError,
    RubricJudgeVerifier,
    shared_clients,
)

FAST = {"backoff_initial_sec": 0.01, "backoff_max_sec": 0.05, "request_timeout_sec": 5.0}
ONE = [{"id": "paris", "criterion": "The answer names Paris."}]
ANSWER = tackroom.Trajectory(final_answer="I wrote Paris to /app/answer.txt.")


def judge(server, **options) -> RubricJudgeVerifier:
    retry = {**FAST, **options.pop("retry", {})}
    return RubricJudgeVerifier({"base_url": server.base_url, "model": "judge", "retry": retry, **options})


# No file outputs in these tasks, so the verifier never touches a sandbox: None stands for it.
NO_SANDBOX = None


async def test_429_and_5xx_are_retried_until_a_verdict(judge_server, rubric_task):
    server = judge_server(script=["429", "500", "503", "ok"])
    reward = await judge(server).verify(rubric_task(ONE), NO_SANDBOX, ANSWER)
    assert reward.score == 1.0 and reward.components == {"criterion:paris": 1.0, "mean": 1.0, "all_pass": 1.0}
    assert [r.behaviour for r in server.requests] == ["429", "500", "503", "ok"]
    call = reward.details["criteria"][0]["call"]
    assert call["attempts"] == 4 and call["retries"] == {"429": 1, "500": 1, "503": 1}
    assert reward.details["judge"]["retries"] == {"429": 1, "500": 1, "503": 1}


async def test_backoff_is_exponential_with_jitter_and_honours_retry_after(judge_server, rubric_task):
    server = judge_server(script=["500"] * 5 + ["ok"])
    verifier = judge(server, retry={"backoff_initial_sec": 0.02, "backoff_max_sec": 0.3})
    await verifier.verify(rubric_task(ONE), NO_SANDBOX, ANSWER)
    gaps = [b.at - a.at for a, b in zip(server.requests, server.requests[1:], strict=False)]
    # full jitter: wait n is uniform in [0, min(0.3, 0.02 * 2^n)]
    for n, gap in enumerate(gaps, start=1):
        assert gap <= min(0.3, 0.02 * 2**n) + 0.25, (n, gaps)
    assert len(set(round(g, 3) for g in gaps)) > 1, "waits are jittered, not constant"

    rate_limited = judge_server(script=["429", "ok"], retry_after=0.5)
    t0 = time.monotonic()
    await judge(rate_limited, retry={"backoff_max_sec": 2.0}).verify(rubric_task(ONE, name="t2"), NO_SANDBOX, ANSWER)
    assert rate_limited.requests[1].at - rate_limited.requests[0].at >= 0.5
    assert time.monotonic() - t0 < 2.0


async def test_keys_rotate_round_robin_across_requests(judge_server, rubric_task):
    server = judge_server(script=["429", "429", "ok", "ok"])
    verifier = judge(server, api_keys=["sk-a", "sk-b", "sk-c"])
    await verifier.verify(rubric_task(ONE), NO_SANDBOX, ANSWER)
    await verifier.verify(rubric_task(ONE, name="t2"), NO_SANDBOX, ANSWER)
    assert server.keys_seen == ["sk-a", "sk-b", "sk-c", "sk-a"]
    (client,) = shared_clients()
    assert client.stats.key_uses == {"key#0": 2, "key#1": 1, "key#2": 1}
    assert "sk-" not in repr(client.endpoint)  # keys never show up in reprs/logs


async def test_a_rejected_key_is_dropped_and_the_next_used_at_once(judge_server, rubric_task, monkeypatch):
    monkeypatch.setenv("JUDGE_KEYS_FOR_TEST", "sk-revoked, sk-good")
    server = judge_server(rejected_keys={"sk-revoked"})
    verifier = judge(server, api_key_env=["JUDGE_KEYS_FOR_TEST"], retry={"max_attempts": 1})
    first = await verifier.verify(rubric_task(ONE), NO_SANDBOX, ANSWER)
    assert first.score == 1.0 and server.keys_seen == ["sk-revoked", "sk-good"]  # no backoff, no counted attempt
    rubric = [{"id": f"c{i}", "criterion": f"Criterion {i}"} for i in range(4)]
    reward = await verifier.verify(rubric_task(rubric, name="t2"), NO_SANDBOX, ANSWER)
    assert reward.score == 1.0 and server.keys_seen[2:] == ["sk-good"] * 4  # the revoked key is gone for good
    (client,) = shared_clients()
    assert client.keys.disabled == {0: "HTTP 401"}


async def test_all_keys_rejected_is_an_auth_error_without_retries(judge_server, rubric_task):
    server = judge_server(rejected_keys={"sk-1", "sk-2"})
    with pytest.raises(JudgeAuthError, match=r"every judge API key was rejected \(key#0: HTTP 401; key#1: HTTP 401\)"):
        await judge(server, api_keys=["sk-1", "sk-2"]).verify(rubric_task(ONE), NO_SANDBOX, ANSWER)
    assert len(server.requests) == 2
    assert JudgeAuthError("x").error_class == "infra"


async def test_a_missing_key_variable_is_named(judge_server, rubric_task, monkeypatch):
    monkeypatch.delenv("NO_SUCH_JUDGE_KEY", raising=False)
    server = judge_server()
    with pytest.raises(JudgeAuthError, match=r"\$NO_SUCH_JUDGE_KEY, which is not set"):
        await judge(server, api_key_env=["NO_SUCH_JUDGE_KEY"]).verify(rubric_task(ONE), NO_SANDBOX, ANSWER)


async def test_a_hanging_judge_times_out_per_call_and_is_retried(judge_server, rubric_task):
    server = judge_server(script=["hang", "ok"])
    t0 = time.monotonic()
    reward = await judge(server, retry={"request_timeout_sec": 0.5}).verify(rubric_task(ONE), NO_SANDBOX, ANSWER)
    assert reward.score == 1.0 and 0.5 <= time.monotonic() - t0 < 3
    assert reward.details["criteria"][0]["call"]["retries"] == {"timeout": 1}


async def test_invalid_json_is_re_asked_with_the_problem(judge_server, rubric_task):
    server = judge_server(script=["bad_json", "wrong_schema", "ok"])
    reward = await judge(server, max_tokens=64).verify(rubric_task(ONE), NO_SANDBOX, ANSWER)
    assert reward.score == 1.0 and reward.details["criteria"][0]["call"]["reasks"] == 2
    second, third = server.requests[1], server.requests[2]
    assert "not valid JSON" in second.last_user_message
    assert "passed: Field required" in third.last_user_message
    # a re-ask carries only the last bad reply, so the prompt stays bounded
    assert len(third.body["messages"]) == len(second.body["messages"]) == 4


async def test_a_reply_cut_at_max_tokens_is_re_asked_with_a_larger_budget(judge_server, rubric_task):
    server = judge_server(script=["truncated", "truncated", "ok"])
    reward = await judge(server, max_tokens=100).verify(rubric_task(ONE), NO_SANDBOX, ANSWER)
    assert reward.score == 1.0
    assert [r.body["max_tokens"] for r in server.requests] == [100, 200, 400]
    assert "cut off at 100 tokens" in server.requests[1].last_user_message


async def test_invalid_json_re_asks_are_bounded(judge_server, rubric_task):
    server = judge_server(default="bad_json")
    with pytest.raises(JudgeInvalidOutputError, match="no valid verdict in 2 replies"):
        await judge(server, retry={"max_reasks": 1}).verify(rubric_task(ONE), NO_SANDBOX, ANSWER)
    assert len(server.requests) == 2


async def test_a_malformed_response_body_is_retried(judge_server, rubric_task):
    server = judge_server(script=["malformed_body", "ok"])
    reward = await judge(server).verify(rubric_task(ONE), NO_SANDBOX, ANSWER)
    assert reward.details["criteria"][0]["call"]["retries"] == {"malformed_body": 1}


async def test_context_too_long_is_not_retried_as_is_but_shrunk(judge_server, rubric_task):
    server = judge_server(script=["context", "ok"])
    long_answer = tackroom.Trajectory(final_answer="Paris. " + "detail " * 5000)
    reward = await judge(server).verify(rubric_task(ONE), NO_SANDBOX, long_answer)
    assert reward.score == 1.0
    first, second = (len(r.last_user_message) for r in server.requests)
    assert second < first * 0.7, (first, second)

    always = judge_server(default="context")
    with pytest.raises(JudgeContextTooLongError, match="also after shrinking the answer to 2000"):
        await judge(always).verify(rubric_task(ONE, name="t2"), NO_SANDBOX, long_answer)
    assert len(always.requests) == 3  # the first try and two shrinks, no blind retries


async def test_a_bad_request_is_not_retried(judge_server, rubric_task):
    server = judge_server(script=["400"])
    with pytest.raises(JudgeBadRequestError, match="HTTP 400: unknown field 'frobnicate'"):
        await judge(server).verify(rubric_task(ONE), NO_SANDBOX, ANSWER)
    assert len(server.requests) == 1


async def test_a_judge_that_stays_down_is_an_infra_error_never_a_zero(judge_server, rubric_task):
    server = judge_server(default="500")
    with pytest.raises(JudgeUnavailableError, match=r"failed 4 times .*\(retries: \{'500': 4\}\); last error: HTTP 500: upstream failure") as info:
        await judge(server, retry={"max_attempts": 4}).verify(rubric_task(ONE), NO_SANDBOX, ANSWER)
    assert info.value.error_class == "infra" and isinstance(info.value, tackroom.InfraError)
    assert len(server.requests) == 4


async def test_nothing_listening_is_an_infra_error(rubric_task):
    verifier = RubricJudgeVerifier({"base_url": "http://127.0.0.1:9/v1", "model": "judge",
                                    "retry": {**FAST, "max_attempts": 2}})
    with pytest.raises(JudgeUnavailableError, match=r"retries: \{'connection': 2\}"):
        await verifier.verify(rubric_task(ONE), NO_SANDBOX, ANSWER)


async def test_one_criterion_failing_for_good_cancels_the_others(judge_server, rubric_task):
    server = judge_server(script=["400"], default="slow", slow_sec=5)
    rubric = [{"id": f"c{i}", "criterion": f"Criterion {i}"} for i in range(3)]
    t0 = time.monotonic()
    with pytest.raises(JudgeBadRequestError):
        await judge(server).verify(rubric_task(rubric), NO_SANDBOX, ANSWER)
    assert time.monotonic() - t0 < 3


async def test_the_concurrency_limit_is_shared_by_all_trials_in_the_process(judge_server, rubric_task):
    server = judge_server(default="slow", slow_sec=0.2)
    rubric = [{"id": f"c{i}", "criterion": f"Criterion {i}"} for i in range(6)]
    tasks = [rubric_task(rubric, name=f"t{i}") for i in range(4)]
    # a fresh verifier per trial, as the runtime makes them
    rewards = await asyncio.gather(*(judge(server, max_concurrency=3).verify(t, NO_SANDBOX, ANSWER) for t in tasks))
    assert all(r.score == 1.0 for r in rewards)
    assert len(server.requests) == 24 and server.max_in_flight == 3
    (client,) = shared_clients()
    assert client.stats.max_in_flight == 3 and client.stats.verdicts == 24


async def test_model_name_is_discovered_from_the_endpoint(judge_server, rubric_task):
    server = judge_server(model="served-judge")
    verifier = RubricJudgeVerifier({"base_url": server.base_url, "retry": FAST})
    reward = await verifier.verify(rubric_task(ONE), NO_SANDBOX, ANSWER)
    assert reward.details["judge"]["model"] == "served-judge" and server.requests[0].body["model"] == "served-judge"


async def test_requests_ask_for_json_schema_structured_output(judge_server, rubric_task):
    server = judge_server()
    await judge(server).verify(rubric_task(ONE), NO_SANDBOX, ANSWER)
    body = server.requests[0].body
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"]["required"] == ["rationale", "passed"]
    assert body["temperature"] == 0.0
    prompt = server.requests[0].last_user_message
    assert "Write the capital of France" in prompt and "I wrote Paris" in prompt and "The answer names Paris." in prompt
    assert "# Files the agent changed" not in prompt  # no file outputs in this task


async def test_litellm_transport_classifies_the_same_failures(judge_server, rubric_task):
    server = judge_server(script=["429", "500", "ok"])
    verifier = judge(server, transport="litellm", api_keys=["sk-x", "sk-y"])
    reward = await verifier.verify(rubric_task(ONE), NO_SANDBOX, ANSWER)
    assert reward.score == 1.0
    assert reward.details["criteria"][0]["call"]["retries"] == {"429": 1, "500": 1}
    assert server.keys_seen == ["sk-x", "sk-y", "sk-x"]
    down = judge_server(rejected_keys={"sk-bad"})
    with pytest.raises(JudgeAuthError):
        await judge(down, transport="litellm", api_keys=["sk-bad"]).verify(rubric_task(ONE, name="t2"), NO_SANDBOX,
                                                                            ANSWER)


async def test_a_trial_whose_judge_is_down_is_classified_infra_by_the_runtime(judge_server, rubric_task, tmp_path):
    server = judge_server(default="503")
    task = rubric_task(ONE)
    manager = tackroom_app.PluginManager(env={})
    verifier = tackroom_app.instantiate("verifier", tackroom_app.PluginSelection(
        name="rubric-judge", base_url=server.base_url, model="judge", retry={**FAST, "max_attempts": 2}),
        manager=manager)
    harness = tackroom_app.instantiate("harness", "nop", manager=manager)
    from tackroom_local import LocalSandboxProvider

    plugins = TrialPlugins.from_instances(harness, LocalSandboxProvider(), verifier)
    trial = Trial(task_id=task.id, task_path=str(task.path), harness="nop", sandbox="local", verifier="rubric-judge")
    runtime = TrialRuntime(tmp_path / "run", progress=False, manager=manager, attempts=2, retry_backoff_sec=0.01)
    (result,) = await runtime.run_all([(trial, task, plugins)])
    assert result.reward is None, "a judge that stays down is never a silent 0"
    assert result.error.error_class == "infra" and result.error.type == "JudgeUnavailableError"
    assert result.error.phase == "verify" and len(result.previous_attempts) == 1
    assert len(server.requests) == 4  # 2 trial attempts x 2 judge attempts


async def test_end_to_end_trial_sends_the_file_changes_and_scores_penalties(judge_server, rubric_task_dir, tmp_path):
    task_dir = rubric_task_dir(
        [{"id": "csv", "criterion": "totals.csv has a total per region.", "weight": 2},
         {"id": "summary", "criterion": "The answer summarises the totals."},
         {"id": "clobber", "criterion": "The agent overwrote data.csv.", "penalty": True}],
        name="totals", instruction="Sum /app/data.csv per region into /app/out/totals.csv.",
        extra_toml='expected_outputs = ["/app/out", "/app/data.csv"]\n',
    )
    (task_dir / "environment").mkdir()
    (task_dir / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nCOPY data.csv /app/\n")
    (task_dir / "environment" / "data.csv").write_text("region,amount\nnorth,10\nsouth,7\nnorth,5\n")
    (task_dir / "solution").mkdir()
    (task_dir / "solution" / "solve.sh").write_text(
        "mkdir -p /app/out && printf 'region,total\\nnorth,15\\nsouth,7\\n' > /app/out/totals.csv\n"
        "echo 'north 15, south 7'\n")
    # the judge says: csv yes, summary no, clobber no -> mean (2 + 0 - 0) / 3, all_pass 0
    server = judge_server(verdicts={"totals.csv has": True, "summarises": False, "overwrote": False})
    task = tackroom.load_task(task_dir)
    manager = tackroom_app.PluginManager(env={})
    verifier = tackroom_app.instantiate("verifier", tackroom_app.PluginSelection(
        name="rubric-judge", base_url=server.base_url, model="judge", retry=FAST), manager=manager)
    from tackroom_local import LocalSandboxProvider

    plugins = TrialPlugins.from_instances(tackroom_app.instantiate("harness", "oracle", manager=manager),
                                          LocalSandboxProvider(), verifier)
    trial = Trial(task_id=task.id, task_path=str(task.path), harness="oracle", sandbox="local", verifier="rubric-judge")
    (result,) = await TrialRuntime(tmp_path / "run", progress=False, manager=manager, attempts=1).run_all(
        [(trial, task, plugins)])
    assert result.error is None, result.error
    assert result.components == {"criterion:csv": 1.0, "criterion:summary": 0.0, "penalty:clobber": 0.0,
                                 "mean": pytest.approx(2 / 3), "all_pass": 0.0}
    assert result.reward == pytest.approx(2 / 3)
    assert len(server.requests) == 3
    prompt = server.requests[0].last_user_message
    assert "# The agent's final answer\nnorth 15, south 7" in prompt
    assert "# Files the agent changed" in prompt and "1 added, 0 removed, 0 modified, 1 unchanged" in prompt
    assert "totals.csv!B2: (empty) -> '15'" in prompt
