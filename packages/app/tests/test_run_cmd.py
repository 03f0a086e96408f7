"""`tackroom run` as a user runs it."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "tasks"


def tackroom(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tackroom_app._cli.main", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_run_json_oracle_on_two_tasks_then_resume(tmp_path):
    args = ["run", str(EXAMPLES / "hello-file"), str(EXAMPLES / "csv-totals"), "--harness", "oracle",
            "--sandbox", "local", "--out", str(tmp_path), "--run-id", "r1", "--json"]
    out = tackroom(*args)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["mean_reward"] == 1.0
    assert [(t["task"], t["harness"], t["sandbox"], t["reward"], t["error"]) for t in data["trials"]] == [
        ("hello-file", "oracle", "local", 1.0, None), ("csv-totals", "oracle", "local", 1.0, None)]
    again = json.loads(tackroom(*args).stdout)
    assert again["trials"] == data["trials"], "a resumed run reuses finished trials"


def test_run_table_and_config_file(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'tasks = ["{EXAMPLES}"]\ninclude = ["hello-*"]\n[harness]\nname = "nop"\n'
                   f'[runtime]\nout = "{tmp_path}"\n')
    out = tackroom("run", "--config", str(cfg))
    assert out.returncode == 0, out.stderr
    assert "hello-file" in out.stdout and "mean reward 0.000" in out.stdout


def test_run_table_to_a_pipe_keeps_long_values_whole(tmp_path):
    # printed to a pipe (or a file) the table is not cut at 80 columns: a task id, the run folder, the summary whole
    task = tmp_path / "hello-file-under-a-task-id-long-enough-to-be-cut-at-eighty-columns"
    shutil.copytree(EXAMPLES / "hello-file", task)
    out = tackroom("run", str(task), "--harness", "nop", "--out", str(tmp_path / "runs"), "--run-id", "whole-lines")
    assert out.returncode == 0, out.stderr
    assert "…" not in out.stdout
    lines = [line.strip() for line in out.stdout.splitlines()]
    assert f"run {tmp_path / 'runs' / 'whole-lines'}" in lines
    assert any(task.name in line and "0.000" in line for line in lines), out.stdout
    assert "mean reward 0.000 over 1 counted trials; errors {'infra': 0, 'model': 0, 'task': 0}; retried attempts 0" \
        in lines


def test_run_errors_a_user_can_hit(tmp_path):
    unknown = tackroom("run", str(EXAMPLES / "hello-file"), "--harness", "orcale")
    assert unknown.returncode == 2 and "no harness named 'orcale'" in unknown.stderr and "oracle" in unknown.stderr
    missing = tackroom("run", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "no such task or dataset directory" in missing.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('[sandbox]\nname = "local"\nroot = "/x"\n')
    cfg = tackroom("run", str(EXAMPLES / "hello-file"), "--config", str(bad))
    assert cfg.returncode == 2 and "sandbox.root: unknown field" in cfg.stderr
    bracketed = tackroom("run", str(tmp_path / "tasks-[policy]-[/]"))  # text rich would read as markup
    assert bracketed.returncode == 2 and "tasks-[policy]-[/]: no such task" in bracketed.stderr, bracketed.stderr


def test_a_flag_naming_the_configured_plugin_keeps_its_options(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'tasks = ["{EXAMPLES / "hello-file"}"]\n[sandbox]\nname = "local"\noutput_limit_bytes = 7\n'
                   f'[runtime]\nout = "{tmp_path}"\n')
    # output_limit_bytes = 7 is below the option's minimum: the error proves the option was kept.
    out = tackroom("run", "--config", str(cfg), "--sandbox", "local")
    assert out.returncode == 2 and "sandbox.output_limit_bytes" in out.stderr
    other = tackroom("run", "--config", str(cfg), "--sandbox", "local", "--harness", "nop", "--json")
    assert other.returncode == 2, "options stay with the configured sandbox"


def test_run_prepares_trials_ahead_from_the_command_line(tmp_path):
    args = ["run", str(EXAMPLES / "hello-file"), str(EXAMPLES / "csv-totals"), "--harness", "oracle",
            "--out", str(tmp_path), "--concurrency", "1", "--json"]
    out = tackroom(*args, "--prepare-ahead", "1")
    assert out.returncode == 0, out.stderr
    trials = json.loads(out.stdout)["trials"]
    assert [t["reward"] for t in trials] == [1.0, 1.0] and all("prepared_wait" in t["timings"] for t in trials)
    bad = tackroom(*args, "--prepare-ahead", "-2")
    assert bad.returncode == 2 and "--prepare-ahead" in bad.stderr, bad.stderr
