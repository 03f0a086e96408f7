"""Against the real local judge: vLLM serving SmolLM2-135M-Instruct with JSON-schema structured outputs.

The endpoint comes from $TACKROOM_ENGINE_URL (see conftest.engine_url). A
135M model's verdicts are not trustworthy, so these tests check what the
plugin guarantees — a schema-valid verdict per criterion through each
transport, the file report in the prompt, a consistent score — not whether
the tiny judge is right.
"""

from __future__ import annotations

import shutil

import pytest

import tackroom
import tackroom_app
from tackroom import Trial
from tackroom_app import TrialPlugins, TrialRuntime
from tackroom_local import LocalSandboxProvider
from tackroom_rubric_judge import RubricJudgeVerifier, score, shared_client, shared_clients
from tackroom_rubric_judge.scoring import CriterionResult

RUBRIC = [
    {"id": "paris", "criterion": "The answer names Paris as the capital of France."},
    {"id": "file", "criterion": "The agent says it wrote the answer to /app/answer.txt."},
    {"id": "rude", "criterion": "The answer insults the user.", "penalty": True},
]
ANSWER = tackroom.Trajectory(final_answer="The capital of France is Paris. I wrote it to /app/answer.txt.")
# Requests are small and answers short: a 135M model on two CPU cores is slow, not unreliable.
JUDGE = {"max_tokens": 200, "retry": {"request_timeout_sec": 120, "max_total_sec": 400}}


def check_consistent(reward: tackroom.Reward, rubric: list[dict]) -> None:
    criteria = reward.details["criteria"]
    assert [c["id"] for c in criteria] == [r["id"] for r in rubric]
    for c in criteria:
        assert isinstance(c["passed"], bool) and c["rationale"].strip()
    rescored = score([CriterionResult(**{k: v for k, v in c.items() if k != "call"}) for c in criteria])
    assert reward.components == rescored.components and reward.score == rescored.mean
    assert 0.0 <= reward.score <= 1.0


@pytest.mark.slow
async def test_structured_verdicts_over_http(engine_url, rubric_task):
    verifier = RubricJudgeVerifier({"base_url": engine_url, **JUDGE})
    reward = await verifier.verify(rubric_task(RUBRIC), None, ANSWER)  # no file outputs: no sandbox needed
    check_consistent(reward, RUBRIC)
    judge = reward.details["judge"]
    assert judge["transport"] == "openai" and judge["model"]  # discovered from /models
    # json_schema guided decoding: every first reply parses, nothing is re-asked or retried
    assert judge["reasks"] == 0 and judge["retries"] == {} and judge["attempts"] == len(RUBRIC)
    assert {"criterion:paris", "criterion:file", "penalty:rude", "mean", "all_pass"} == set(reward.components)


@pytest.mark.slow
async def test_structured_verdicts_through_litellm(engine_url, rubric_task):
    probe = RubricJudgeVerifier({"base_url": engine_url})
    model = await probe.model_name(shared_client(probe.endpoint()))
    verifier = RubricJudgeVerifier({"base_url": engine_url, "transport": "litellm", "model": model, **JUDGE})
    reward = await verifier.verify(rubric_task(RUBRIC[:2]), None, ANSWER)
    check_consistent(reward, RUBRIC[:2])
    assert reward.details["judge"]["transport"] == "litellm" and reward.details["judge"]["reasks"] == 0


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="the local sandbox needs bubblewrap")
async def test_end_to_end_trial_with_file_outputs_on_the_local_sandbox(engine_url, rubric_task_dir, tmp_path):
    task_dir = rubric_task_dir(
        [{"id": "csv", "criterion": "The agent created /app/out/totals.csv with a total for each region."},
                   {"id": "scratch", "criterion": "The agent deleted /app/data.csv.", "weight": -1}],
        name="totals", instruction="Sum the amounts of /app/data.csv per region into /app/out/totals.csv.",
        extra_toml='expected_outputs = ["/app/out"]\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 600\n',
    )
    (task_dir / "environment").mkdir()
    (task_dir / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\nCOPY data.csv /app/\n")
    (task_dir / "environment" / "data.csv").write_text("region,amount\nnorth,10\nsouth,7\nnorth,5\n")
    (task_dir / "solution").mkdir()
    (task_dir / "solution" / "solve.sh").write_text(
        "mkdir -p /app/out\n"
        "awk -F, 'NR>1 {t[$1]+=$2} END {print \"region,total\"; for (r in t) print r\",\"t[r]}' /app/data.csv"
        " > /app/out/totals.csv\necho 'Wrote /app/out/totals.csv with the total per region.'\n"
    )
    task = tackroom.load_task(task_dir)
    manager = tackroom_app.PluginManager(env={})
    verifier = tackroom_app.instantiate("verifier", tackroom_app.PluginSelection(
        name="rubric-judge", base_url=engine_url, score="all_pass", **JUDGE), manager=manager)
    harness = tackroom_app.instantiate("harness", "oracle", manager=manager)
    plugins = TrialPlugins.from_instances(harness, LocalSandboxProvider(), verifier)
    trial = Trial(task_id=task.id, task_path=str(task.path), harness="oracle", sandbox="local", verifier="rubric-judge")
    runtime = TrialRuntime(tmp_path / "run", progress=False, manager=manager, attempts=1)
    (result,) = await runtime.run_all([(trial, task, plugins)])
    assert result.error is None, result.error
    details = result.reward_details
    assert details["score_mode"] == "all_pass" and result.reward == result.components["all_pass"]
    assert set(result.components) == {"criterion:csv", "penalty:scratch", "mean", "all_pass"}
    report = details["files_report"]
    assert "## ADDED /app/out/totals.csv (csv" in report and "totals.csv!A1: (empty) -> 'region'" in report
    assert details["judge"]["reasks"] == 0 and details["judge"]["retries"] == {}
    (client,) = shared_clients()
    assert client.stats.verdicts == 2
    assert (tmp_path / "run" / trial.id / "result.json").is_file()
