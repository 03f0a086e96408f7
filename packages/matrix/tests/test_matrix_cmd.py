"""`tackroom matrix` as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .conftest import EXAMPLES, closed_port, painted, screenshot


def tackroom(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "tackroom_app", *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd, env={**os.environ, "COLUMNS": "160", **(env or {})})


def test_the_command_comes_from_the_package_not_from_core():
    assert tackroom("matrix", "--help").returncode == 0
    without = tackroom("matrix", "--help", env={"TACKROOM_BLOCK_PLUGINS": "tackroom-matrix"})
    assert without.returncode != 0 and "`tackroom matrix` is provided by tackroom-matrix, which is not installed" in without.stderr
    assert "pip install ./packages/app ./packages/matrix" in without.stderr


def test_the_demo_config_runs_and_writes_every_report(tmp_path, chromium):
    # The demo as shipped, except that its model endpoint is down (so model rows cost nothing here):
    # the reference rows run, model rows are reported as infra errors with the fix.
    text = (EXAMPLES / "matrix" / "demo.toml").read_text()
    assert 'base_url = "http://127.0.0.1:8011/v1"' in text
    demo = tmp_path / "demo.toml"
    demo.write_text(text.replace("http://127.0.0.1:8011/v1", f"http://127.0.0.1:{closed_port()}/v1")
                    .replace('"../tasks"', f'"{EXAMPLES / "tasks"}"'))
    out = tackroom("matrix", str(demo), "--out", str(tmp_path), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    cells = {(c["model"], c["harness"]): c for c in data["cells"]}
    n = len(data["tasks"]) * data["passes"]
    for (model, harness), c in cells.items():
        if model is not None:
            assert model == "smollm2" and c["status"] == "unreachable" and c["errors"]["infra"] == n, harness
    assert "tackroom model up" in out.stderr
    assert cells[(None, "oracle")]["pass_at_1"] == 1.0 and cells[(None, "oracle")]["n_trials"] == n
    assert cells[(None, "nop")]["pass_at_1"] == 0.0 and cells[(None, "nop")]["pass_at_k"] == 0.0
    assert data["passes"] == 3 and data["k"] == 3 and len(data["tasks"]) >= 10
    run_dir = tmp_path / "matrix-demo"
    assert {p.name for p in run_dir.iterdir()} >= {"matrix.json", "matrix.csv", "report.html", "matrix.config.json"}
    _, _, rows = screenshot(chromium, run_dir / "report.html", tmp_path / "demo.png", tmp_path)
    colours, share = painted(rows)
    assert colours > 200 and share > 0.2, (colours, share)


def test_the_table_to_a_pipe_keeps_a_long_row_label_whole(tmp_path):
    # printed to a pipe (or a file) the table is not cut with "…", not even where COLUMNS is set narrower than a row
    label = "oracle-" + "with-a-row-label-longer-than-a-window-is-wide-" * 3
    cfg = tmp_path / "long.toml"
    cfg.write_text(f'tasks = ["{EXAMPLES / "tasks"}"]\ninclude = ["hello-file"]\npasses = 1\nk = 1\n'
                   f'[[harnesses]]\nname = "oracle"\nlabel = "{label}"\n[runtime]\nout = "{tmp_path / "runs"}"\n')
    out = tackroom("matrix", str(cfg))
    assert out.returncode == 0, out.stderr
    assert "…" not in out.stdout
    row = next((line for line in out.stdout.splitlines() if label in line), None)
    assert row is not None and row.split()[-6:] == ["1.00", "1.00", "1/1", "0/0/0", "0.0%", "0"], out.stdout


def test_table_output_resume_and_errors(tmp_path):
    cfg = tmp_path / "small.toml"
    cfg.write_text(f'tasks = ["{EXAMPLES / "tasks"}"]\ninclude = ["hello-file"]\npasses = 2\n'
                   f'[runtime]\nout = "{tmp_path / "runs"}"\n')
    first = tackroom("matrix", str(cfg))
    assert first.returncode == 0, first.stderr
    assert "oracle" in first.stdout and "1.00 ± 0.00" in first.stdout and "report.html" in first.stdout
    assert (tmp_path / "runs" / "matrix-small" / "report.html").is_file()
    again = tackroom("matrix", str(cfg), "--run-id", "matrix-small", "--json")
    assert json.loads(again.stdout)["totals"]["n_trials"] == 4 and "4 resumed" not in again.stdout

    bad = tmp_path / "bad.toml"
    bad.write_text('[[harnesses]]\nname = "oracle"\nmax_turns = 3\n')
    out = tackroom("matrix", str(bad))
    assert out.returncode == 2 and "harnesses[0].max_turns: unknown field" in out.stderr
    assert "options" in out.stderr

    down = tmp_path / "down.toml"
    down.write_text(f'tasks = ["{EXAMPLES / "tasks"}"]\ninclude = ["hello-file"]\n'
                    f'[[models]]\nlabel = "smollm2"\nbase_url = "http://127.0.0.1:{closed_port()}/v1"\n'
                    '[[harnesses]]\nname = "oracle"\n')
    note = tackroom("matrix", str(down), "--out", str(tmp_path / "runs"))
    assert note.returncode == 0 and "no listed harness calls a model" in note.stderr
    assert tackroom("matrix", str(tmp_path / "missing.toml")).returncode == 2


def test_prepare_ahead_from_the_command_line(tmp_path):
    cfg = tmp_path / "ahead.toml"
    cfg.write_text(f'tasks = ["{EXAMPLES / "tasks"}"]\ninclude = ["hello-file"]\npasses = 3\nk = 1\n'
                   f'[[harnesses]]\nname = "oracle"\n[runtime]\nout = "{tmp_path / "runs"}"\nconcurrency = 1\n')
    out = tackroom("matrix", str(cfg), "--prepare-ahead", "2", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["totals"]["n_trials"] == 3
    results = [json.loads(p.read_text()) for p in (tmp_path / "runs" / "matrix-ahead").glob("*/result.json")]
    assert len(results) == 3 and all("prepared_wait" in r["timings"] for r in results)
    bad = tackroom("matrix", str(cfg), "--prepare-ahead", "-1")
    assert bad.returncode == 2 and "--prepare-ahead" in bad.stderr and "greater than or equal to 0" in bad.stderr
