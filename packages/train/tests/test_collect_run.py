"""``tackroom collect`` end to end: the ``answer`` harness on the overfit tasks (local sandbox, test-script grader)
against a scripted teacher served for the run, through the real policy gateway or straight to its chat route;
the kept trials written as demonstrations, the summary beside them, and the errors a user meets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tackroom import ConfigError, Trajectory
from tackroom_train.collect.config import load_collect_config, parse_collect_config
from tackroom_train.collect.run import collect, load_policy_side
from tackroom_train.demonstrations import read_demonstrations

ROOT = Path(__file__).resolve().parents[3]
OVERFIT = ROOT / "examples" / "train" / "overfit-tasks"  # say-blue, say-seven (answer: 7), say-yes
SAYS = "import re\n\ndef reply(prompt):\n    said = re.findall(r'Say (\\w+)\\.', prompt)\n    return {answer}\n"


@pytest.fixture(scope="module")
def policy():
    return load_policy_side("smollm2")


def teacher(tmp_path: Path, answer: str = "said[-1]") -> str:
    """A scripted teacher file: by default it says what the task asks it to say (reward 1 on every task)."""
    path = tmp_path / "teacher.py"
    path.write_text(SAYS.format(answer=answer))
    return f"{path}:reply"


def config(tmp_path: Path, *, policy: dict | None = None, harness: dict | None = None, **collect_fields):
    return parse_collect_config({
        "tasks": [str(OVERFIT)], "harness": harness or {"name": "answer"}, "policy": policy or {},
        "runtime": {"out": str(tmp_path / "runs"), "attempts": 1, "retry_backoff_sec": 0},
        "collect": {"tokenizer": "smollm2", "out": str(tmp_path / "data.jsonl"), **collect_fields}})


async def test_episodes_through_the_gateway_are_copied_and_summarised(tmp_path, policy):
    summary = await collect(config(tmp_path, teacher_script=teacher(tmp_path)), progress=False, policy=policy)

    rows = list(read_demonstrations(tmp_path / "data.jsonl"))
    assert summary.dataset == str(tmp_path / "data.jsonl") and len(rows) == 3
    assert {r.task_id for r in rows} == {"say-blue", "say-seven", "say-yes"}
    for row in rows:  # the gateway's record, copied: the ids the trial's trajectory holds
        written = Trajectory.model_validate_json((Path(row.source) / "trajectory.json").read_text())
        assert (row.input_ids, row.loss_mask) == (written.token_ids, written.loss_mask)
        assert not row.rerendered and row.reward == 1.0 and row.tokenizer == "smollm2" and row.split == "train"
    said = {r.task_id: policy.template.decode([i for i, m in zip(r.input_ids, r.loss_mask, strict=True) if m])
            for r in rows}
    assert said == {"say-blue": "blue<|im_end|>", "say-seven": "7<|im_end|>", "say-yes": "yes<|im_end|>"}

    on_disk = json.loads((tmp_path / "data.summary.json").read_text())
    assert on_disk == json.loads((Path(summary.run_dir) / "collect.json").read_text())
    assert on_disk["harnesses"]["answer"] | {"errors": None} == {
        "trials": 3, "kept": 3, "demonstrations": 3, "trained_tokens": 6, "rerendered": 0, "errors": None}
    assert on_disk["tasks"]["say-seven"]["trained_tokens"] == 2 and on_disk["teacher"].startswith("http://127.0.0.1")
    assert all(t["how"] == "recorded" and t["kept"] for t in on_disk["trials"]) and summary.problem() is None


async def test_a_text_only_teacher_is_rerendered_per_harness_row_into_parquet(tmp_path, policy):
    rows_config = [{"name": "answer", "label": "plain"},
                   {"name": "answer", "label": "briefed", "options": {"system": "Answer with one word."}}]
    summary = await collect(config(tmp_path, policy={"gateway": False}, teacher_script=teacher(tmp_path), passes=2,
                                   harnesses=rows_config, out=str(tmp_path / "data.parquet")),
                            progress=False, policy=policy)

    rows = list(read_demonstrations(tmp_path / "data.parquet"))
    assert len(rows) == 12 and all(r.rerendered for r in rows)
    assert {r.harness for r in rows} == {"plain", "briefed"}
    briefed = next(r for r in rows if r.harness == "briefed")
    assert "Answer with one word." in policy.template.decode(briefed.input_ids)
    assert set(summary.harnesses) == {"plain", "briefed"}
    assert summary.harnesses["plain"].trials == 6 and summary.harnesses["plain"].rerendered == 6
    assert summary.tasks["say-blue"].demonstrations == 4 and summary.total.demonstrations == 12


async def test_a_teacher_in_another_tokenizer_gives_rows_in_the_policys(tmp_path, policy):
    summary = await collect(config(tmp_path, policy={"tokenizer": "qwen3"}, teacher_script=teacher(tmp_path)),
                            progress=False, policy=policy)
    rows = list(read_demonstrations(tmp_path / "data.jsonl"))
    assert summary.total.rerendered == 3 and all(r.rerendered and max(r.input_ids) < policy.vocab_size for r in rows)
    trained = {policy.template.decode([i for i, m in zip(r.input_ids, r.loss_mask, strict=True) if m]) for r in rows}
    assert trained == {"blue<|im_end|>", "7<|im_end|>", "yes<|im_end|>"}


async def test_no_trial_at_the_threshold_writes_no_dataset_and_says_so(tmp_path, policy):
    (tmp_path / "data.jsonl").write_text("")  # what a dataset of an earlier collection would be: left alone
    summary = await collect(config(tmp_path, teacher_script=teacher(tmp_path, answer="'no idea'")),
                            progress=False, policy=policy)
    assert summary.dataset is None and (tmp_path / "data.jsonl").read_text() == ""
    assert summary.total.trials == 3 and summary.total.kept == 0
    assert "no trial reached min_reward 1 (best reward 0" in summary.problem()
    assert "nothing written" in summary.problem() and (tmp_path / "data.summary.json").is_file()
    assert all("below min_reward" in t.reason for t in summary.trials)


@pytest.mark.slow  # the gateway's retries of a failing engine
async def test_a_teacher_that_errors_makes_every_trial_infra_and_the_summary_says_so(tmp_path, policy):
    summary = await collect(config(tmp_path, teacher_script=teacher(tmp_path, answer="1 / 0")),
                            progress=False, policy=policy)
    assert summary.dataset is None and summary.total.errors["infra"] == 3 and summary.total.kept == 0
    assert "every trial (3) failed on infra" in summary.problem()
    assert all(t.error_class == "infra" and "ended with an error of class infra" in t.reason for t in summary.trials)


async def test_refusals_before_anything_runs(tmp_path, policy):
    script = teacher(tmp_path)
    cases = [
        (config(tmp_path, teacher_script=script, out=str(tmp_path / "missing" / "d.jsonl")),
         "the folder .*missing does not exist; create it"),
        (config(tmp_path, teacher_script=script, tokenizer=None), "name the policy's tokenizer"),
        (config(tmp_path), "no teacher: set \\[policy\\] base_url"),
        (config(tmp_path, teacher_script=script, harness={"name": "oracle"}), "calls no model"),
        (config(tmp_path, teacher_script=str(tmp_path / "nowhere.py:reply")), "no such file"),
    ]
    for cfg, message in cases:
        with pytest.raises(ConfigError, match=message):
            await collect(cfg, progress=False, policy=policy)
    assert not (tmp_path / "runs").exists()  # no run folder was claimed


@pytest.mark.parametrize("tokenizer", ["/nonexistent/tokenizer", "gpt-17"])
async def test_a_policy_tokenizer_that_cannot_load_is_refused(tmp_path, tokenizer):
    with pytest.raises(ConfigError, match=f"collect.tokenizer '{tokenizer}' cannot be loaded"):
        await collect(config(tmp_path, teacher_script=teacher(tmp_path), tokenizer=tokenizer), progress=False)


def test_a_wrong_key_lists_the_valid_ones(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('tasks = ["tasks"]\n[collect]\ntokeniser = "smollm2"\n')
    with pytest.raises(ConfigError) as caught:
        load_collect_config(path)
    assert "collect.tokeniser: unknown field" in str(caught.value)
    assert "valid fields of collect: harnesses, min_reward, out, passes, split, teacher_script, tokenizer" in str(
        caught.value)
    path.write_text('tasks = ["tasks"]\n[collect]\nout = "d.csv"\nmin_reward = nan\n')
    with pytest.raises(ConfigError, match="(?s)collect.out: .*jsonl or .parquet.*min_reward: must be a finite"):
        load_collect_config(path)


@pytest.mark.slow  # a world's MCP server starts
async def test_a_tool_using_harness_against_a_chat_only_teacher_keeps_its_tools(tmp_path, policy):
    """The lookup family's scripted teacher (examples/worlds/lookup/teacher.py: chat only, it calls the world's
    read tool, then answers) under archipelago: no ids anywhere, so the requests are recorded by the proxy and the
    demonstration is re-rendered with the tools archipelago declared."""
    import importlib.util

    from tackroom_gateway import InLoopServer

    spec = importlib.util.spec_from_file_location("lookup_teacher", ROOT / "examples/worlds/lookup/teacher.py")
    lookup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lookup)
    server = InLoopServer(lookup.app(), what="the lookup teacher", graceful_timeout_s=1)
    port = await server.start()
    try:
        cfg = config(tmp_path, policy={"base_url": f"http://127.0.0.1:{port}/v1", "model": "teacher"},
                     harness={"name": "archipelago", "max_steps": 3})
        cfg.tasks, cfg.include = [str(ROOT / "examples/worlds/lookup/train/tasks")], ["csv-1-01"]
        summary = await collect(cfg, progress=False, policy=policy)
    finally:
        await server.stop()
    (row,) = read_demonstrations(tmp_path / "data.jsonl")
    assert summary.total.kept == 1 and row.rerendered and row.task_id == "csv-1-01"
    text = policy.template.decode(row.input_ids)
    assert "files_read_file" in text.split("<|im_start|>user")[0]  # declared in the system prompt, as at training
    trained = policy.template.decode([i for i, m in zip(row.input_ids, row.loss_mask, strict=True) if m])
    assert trained == ('<tool_call>\n{"name": "files_read_file", "arguments": {"path": "/workspace/inventory.csv"}}'
                       '\n</tool_call><|im_end|>YN1B7O<|im_end|>')


def run_command(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tackroom_app", "collect", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


@pytest.mark.slow  # three processes, each importing the stack
def test_the_command_reads_a_config_beside_its_files_and_prints_the_tables(tmp_path):
    teacher(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "collect.toml").write_text(
        f'tasks = ["{OVERFIT}"]\ninclude = ["say-b*"]\n[harness]\nname = "answer"\n'
        '[collect]\ntokenizer = "smollm2"\nteacher_script = "teacher.py:reply"\nout = "data/blue.jsonl"\n'
        '[runtime]\nout = "runs"\n')
    done = run_command("collect.toml", "--passes", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "per harness" in done.stdout and "│ answer  │ 2      │ 2    │ 2" in done.stdout
    assert "2 demonstrations (4 trained tokens) → data/blue.jsonl" in done.stdout
    assert len(list(read_demonstrations(tmp_path / "data" / "blue.jsonl"))) == 2

    nothing = run_command("collect.toml", "--min-reward", "1.5", "--json", cwd=tmp_path)
    assert nothing.returncode == 1 and json.loads(nothing.stdout)["dataset"] is None
    assert "error: no trial reached min_reward 1.5" in nothing.stderr

    refused = run_command("collect.toml", "--out", "elsewhere/x.jsonl", cwd=tmp_path)
    assert refused.returncode == 2 and "--out (collect.out)" not in refused.stderr
    assert "the folder elsewhere does not exist" in refused.stderr
