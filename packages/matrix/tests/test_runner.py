"""Running matrices for real: local sandbox, test-script verifier, oracle/nop, a harness that calls a real model."""

from __future__ import annotations

import json
import time

import pytest

from tackroom import ConfigError, Trial, load_task
from tackroom_matrix import EndpointUnreachableError, build_report, parse_matrix_config, run_matrix

from .conftest import EXAMPLES, closed_port, write_task

TASKS = str(EXAMPLES / "tasks")


def config(tmp_path, **overrides):
    data = {"tasks": [TASKS], "include": ["hello-file", "csv-totals"], "passes": 2,
            "runtime": {"out": str(tmp_path / "runs"), "run_id": "m", "retry_backoff_sec": 0.01}}
    data.update(overrides)
    return parse_matrix_config(data)


def started(outcome) -> dict[str, str]:
    return {r.trial_id: r.started_at for r in outcome.results}


def trial_id(task_dir, harness: str, pass_index: int, model: str | None = None) -> str:
    """The id (and result folder) of a matrix trial: task name plus content hash, harness label, model, pass."""
    return Trial.for_task(load_task(task_dir), harness=harness, sandbox="local", verifier="test-script",
                          model=model, pass_index=pass_index).id


async def test_reference_rows_run_and_a_rerun_resumes(tmp_path, matrix_manager):
    first = await run_matrix(config(tmp_path), manager=matrix_manager, progress=False)
    cells = {c.harness: c for c in first.cells}
    assert set(cells) == {"oracle", "nop"} and all(c.model is None for c in first.cells)
    assert cells["oracle"].pass_at_1 == 1.0 and cells["oracle"].pass_at_k == 1.0 and cells["oracle"].std == 0.0
    assert cells["nop"].pass_at_1 == 0.0 and cells["nop"].n_trials == 4 and cells["nop"].non_model_error_rate == 0.0
    assert cells["oracle"].domains["finance"].pass_at_1 == 1.0 and cells["oracle"].behaviour == {"turns": 1.0}
    run_dir = tmp_path / "runs" / "m"
    assert sorted(p.name for p in run_dir.iterdir() if p.is_dir()) == sorted(
        trial_id(EXAMPLES / "tasks" / t, h, p) for t in ("hello-file", "csv-totals") for h in ("oracle", "nop")
        for p in (0, 1))

    again = await run_matrix(config(tmp_path), manager=matrix_manager, progress=False)
    assert started(again) == started(first), "finished trials are reused, not re-run"

    more = await run_matrix(config(tmp_path, passes=3), manager=matrix_manager, progress=False)
    new = {tid for tid, s in started(more).items() if started(first).get(tid) != s}
    assert new == {trial_id(EXAMPLES / "tasks" / t, h, 2) for t in ("hello-file", "csv-totals")
                   for h in ("oracle", "nop")}
    assert {c.harness: c.n_trials for c in more.cells} == {"oracle": 6, "nop": 6}


async def test_a_changed_option_set_under_the_same_label_is_not_mixed_in(tmp_path, matrix_manager):
    await run_matrix(config(tmp_path, include=["hello-file"], passes=1), manager=matrix_manager, progress=False)
    changed = config(tmp_path, include=["hello-file"], passes=1,
                     harnesses=[{"name": "oracle", "options": {"max_output_chars": 10}}, {"name": "nop"}])
    with pytest.raises(ConfigError, match=r"(?s)harness row 'oracle': was .*max_output_chars.*--run-id NEW"):
        await run_matrix(changed, manager=matrix_manager, progress=False)
    relabelled = config(tmp_path, include=["hello-file"], passes=1,
                        harnesses=[{"name": "oracle", "label": "oracle-short", "options": {"max_output_chars": 10}}])
    outcome = await run_matrix(relabelled, manager=matrix_manager, progress=False)
    assert outcome.cells[0].harness == "oracle-short" and outcome.cells[0].pass_at_1 == 1.0


async def test_a_cell_whose_every_trial_errors(tmp_path, matrix_manager):
    for name in ("no-solution-1", "no-solution-2"):
        write_task(tmp_path / "broken", name, instruction="write /app/x", solve_sh=None,
                   test_sh="echo 0 > /logs/verifier/reward.txt\n")
    outcome = await run_matrix(config(tmp_path, tasks=[str(tmp_path / "broken")], include=[]),
                               manager=matrix_manager, progress=False)
    cells = {c.harness: c for c in outcome.cells}
    oracle = cells["oracle"]
    assert oracle.errors == {"infra": 0, "model": 0, "task": 4} and oracle.n_trials == 4 and oracle.n_counted == 0
    assert oracle.pass_at_1 is None and oracle.pass_at_k is None and oracle.mean_reward is None
    assert oracle.non_model_error_rate == 1.0 and oracle.error_types[0].type == "TaskError"
    assert "solve.sh: missing" in oracle.error_types[0].message
    assert cells["nop"].pass_at_1 == 0.0 and cells["nop"].non_model_error_rate == 0.0
    report = build_report(outcome)
    assert report.totals.non_model_errors == 4 and report.totals.non_model_error_rate == 0.5


async def test_an_unreachable_model_marks_its_cells_as_infra_errors_and_the_rest_runs(tmp_path, matrix_manager):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    cfg = config(tmp_path, include=["hello-file"], models=[{"label": "smollm2", "base_url": url}],
                 harnesses=[{"name": "chat-once"}, {"name": "nop"}])
    notices: list[str] = []
    t0 = time.monotonic()
    outcome = await run_matrix(cfg, manager=matrix_manager, progress=False, on_notice=notices.append)
    assert time.monotonic() - t0 < 30
    cells = {c.harness: c for c in outcome.cells}
    chat = cells["chat-once"]
    assert chat.model == "smollm2" and chat.status == "unreachable" and chat.n_trials == 0 and chat.n_planned == 2
    assert chat.errors["infra"] == 2 and chat.non_model_error_rate == 1.0
    assert chat.error_types[0].type == "EndpointUnreachableError"
    assert "tackroom model up" in chat.error_types[0].message and url in chat.error_types[0].message
    assert any("tackroom model up" in n for n in notices)
    assert cells["nop"].n_trials == 2 and cells["nop"].model is None
    assert not any("chat-once" in p.name for p in (tmp_path / "runs" / "m").iterdir())
    report = build_report(outcome)
    assert report.models[0].reachable is False and "not reachable" in report.models[0].problem

    cfg.require_models = True
    with pytest.raises(EndpointUnreachableError, match="tackroom model up"):
        await run_matrix(cfg, manager=matrix_manager, progress=False)

    # the model never ran under this label, so fixing its base_url is not a "changed setup"
    fixed = config(tmp_path, include=["hello-file"], harnesses=[{"name": "chat-once"}, {"name": "nop"}],
                   models=[{"label": "smollm2", "base_url": f"http://127.0.0.1:{closed_port()}/v1"}])
    again = await run_matrix(fixed, manager=matrix_manager, progress=False, on_notice=notices.append)
    assert {c.harness: c.status for c in again.cells} == {"chat-once": "unreachable", "nop": "ok"}


@pytest.mark.engine
async def test_a_real_model_under_two_labels_gives_a_transfer_view(tmp_path, matrix_manager, engine_url):
    write_task(tmp_path / "tasks", "say-hello", instruction="Say hello.", domain="chat",
               test_sh='if grep -qi hello /app/answer.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n')
    cfg = config(tmp_path, tasks=[str(tmp_path / "tasks")], include=[], passes=2,
                 models=[{"label": "greedy", "base_url": engine_url, "sampling": {"temperature": 0.0}},
                         {"label": "hot", "base_url": engine_url, "sampling": {"temperature": 1.5, "seed": 3}}],
                 harnesses=[{"name": "chat-once", "options": {"max_tokens": 16}},
                            {"name": "chat-once-gw", "options": {"max_tokens": 16}}, {"name": "oracle"}])
    outcome = await run_matrix(cfg, manager=matrix_manager, progress=False)
    cells = {(c.model, c.harness): c for c in outcome.cells}
    assert set(cells) == {(m, h) for m in ("greedy", "hot") for h in ("chat-once", "chat-once-gw")} | {
        (None, "oracle")}
    for (model, _harness), c in cells.items():
        if model is None:
            continue
        assert c.errors == {"infra": 0, "model": 0, "task": 0}, c.error_types
        assert c.n_counted == 2 and c.pass_at_1 in (0.0, 0.5, 1.0)
        assert 0 < c.behaviour["assistant_tokens_per_turn"] <= 16 and c.behaviour["turns"] == 1.0
    report = build_report(outcome)
    by_harness = {t.harness: t for t in report.transfer}
    assert set(by_harness) == {"chat-once", "chat-once-gw"}
    t = by_harness["chat-once"]
    assert (t.baseline, t.candidate) == ("greedy", "hot")
    assert t.gain == cells[("hot", "chat-once")].pass_at_1 - cells[("greedy", "chat-once")].pass_at_1
    assert report.models[0].model == "smollm2", "the served model name is found at /models"
    run_dir = tmp_path / "runs" / "m"
    say_hello = tmp_path / "tasks" / "say-hello"
    direct_id = trial_id(say_hello, "chat-once", 0, "greedy")
    direct = json.loads((run_dir / direct_id / "trajectory.json").read_text())
    routed = json.loads((run_dir / trial_id(say_hello, "chat-once-gw", 0, "greedy") / "trajectory.json").read_text())
    assert direct["token_ids"] == [], "a harness that is not chat-only talks to the engine directly"
    assert routed["token_ids"] and sum(routed["loss_mask"]) > 0, "the chat-only harness went through the gateway"
    saved = json.loads((run_dir / direct_id / "result.json").read_text())
    assert saved["model"] == "greedy" and saved["metrics"]["assistant_tokens"] > 0
