"""The CLI as a user runs it."""

import json
import subprocess
import sys

from typer.testing import CliRunner

import tackroom
import tackroom_app
from tackroom_app._cli.main import app

runner = CliRunner()


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"tackroom {tackroom.__version__}"


def test_plugins_json_lists_builtins_with_required_keys():
    result = runner.invoke(app, ["plugins", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    nop = next(r for r in rows if r["name"] == "nop")
    assert nop["kind"] == "harness" and nop["distribution"] == "tackroom" and nop["version"]
    assert all({"name", "kind", "distribution", "version"} <= r.keys() for r in rows)
    assert all(r["kind"] in (*tackroom_app.PLUGIN_KINDS, "executor") for r in rows)
    executors = {r["name"]: r for r in rows if r["kind"] == "executor"}
    assert executors["asyncio"]["distribution"] == "tackroom"  # built-ins are plugins too
    assert executors["ray"]["distribution"] == "tackroom-ray" and executors["ray"]["reference"].startswith("tackroom_ray")


def test_plugins_all_adds_catalogue_entries_with_install_hint():
    rows = json.loads(runner.invoke(app, ["plugins", "--all", "--json"]).output)
    installed = {(r["kind"], r["name"]) for r in rows if r["installed"]}
    missing = [r for r in rows if not r["installed"]]
    assert all((r["kind"], r["name"]) not in installed for r in missing)
    assert all(r["install"].startswith("pip install") for r in missing)


def test_plugins_table_runs_as_a_console_script():
    out = subprocess.run([sys.executable, "-m", "tackroom_app._cli.main", "plugins"], capture_output=True, text=True, check=True)
    assert "nop" in out.stdout


def test_plugins_table_to_a_pipe_keeps_every_row_whole():
    # printed to a pipe (or a file) the table is not cut or wrapped at 80 columns: a row a line, each value whole
    rows = json.loads(runner.invoke(app, ["plugins", "--json"]).output)
    out = subprocess.run([sys.executable, "-m", "tackroom_app", "plugins"], capture_output=True, text=True, check=True,
                         stdin=subprocess.DEVNULL)
    assert "…" not in out.stdout
    lines = out.stdout.splitlines()
    for r in rows:
        said = r["summary"] if r["usable"] else r["problem"]
        assert any(r["name"] in line and r["distribution"] in line and said in line for line in lines), r


def test_plugins_never_imports_heavy_sdks():
    code = ("import sys, json; from tackroom_app._cli.plugins_cmd import plugin_rows; plugin_rows(True); "
            "print(json.dumps([m for m in ('torch','modal','daytona','litellm') if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_a_command_of_a_missing_distribution_answers_with_its_install_line():
    import os

    core_alone = {**os.environ, "TACKROOM_LOAD_PLUGINS": ""}
    for command, distribution, path in (("matrix", "tackroom-matrix", "packages/app ./packages/matrix"),
                                        ("train", "tackroom-train",
                                         "packages/app ./packages/gateway ./packages/train")):
        out = subprocess.run([sys.executable, "-m", "tackroom_app._cli.main", command, "--config", "x.toml"],
                             capture_output=True, text=True, env=core_alone, timeout=120)
        assert out.returncode == 2
        message = " ".join(out.stderr.split())
        assert f"`tackroom {command}` is provided by {distribution}, which is not installed: pip install ./{path}" \
            in message, out.stderr
    listed = subprocess.run([sys.executable, "-m", "tackroom_app._cli.main", "--help"], capture_output=True, text=True,
                            env={**core_alone, "COLUMNS": "300"}, timeout=120)
    assert "(not installed: pip install ./packages/gateway ./packages/engine" in listed.stdout, listed.stdout


def test_run_without_the_local_sandbox_installed_names_its_install_line(tmp_path):
    """`local` is the default sandbox but its own distribution: with core alone, `tackroom run` says how to get it,
    before any trial (no run folder)."""
    import os
    from pathlib import Path

    hello = Path(__file__).resolve().parents[3] / "examples" / "tasks" / "hello-file"
    core_alone = {**os.environ, "TACKROOM_LOAD_PLUGINS": "", "COLUMNS": "300"}
    out = subprocess.run([sys.executable, "-m", "tackroom_app._cli.main", "run", str(hello), "--out", str(tmp_path / "runs"),
                          "--json"], capture_output=True, text=True, env=core_alone, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    message = " ".join((out.stdout + out.stderr).split())
    assert "no sandbox named 'local' is installed" in message, message
    assert ("'local' is provided by tackroom-local: pip install ./packages/sandbox-kit ./plugins/sandboxes/local"
            in message), message
    assert not (tmp_path / "runs").exists()


def test_harness_options_on_the_command_line_reach_the_harness_and_are_checked(tmp_path):
    """`--harness-option KEY=VALUE` (`-O`) sets what `[harness]` would: VALUE is read as TOML, a wrong key or value
    is refused before any trial with the options that exist."""
    import os
    from pathlib import Path

    hello = str(Path(__file__).resolve().parents[3] / "examples" / "tasks" / "hello-file")
    out = str(tmp_path / "runs")

    def tackroom_run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tackroom_app._cli.main", "run", hello, "--out", out, *args],
                              capture_output=True, text=True, env={**os.environ, "COLUMNS": "300"}, timeout=300)

    wrong_key = tackroom_run("--harness", "oracle", "-O", "bogus=1")
    assert wrong_key.returncode == 2 and "harness.bogus: unknown field" in wrong_key.stderr, wrong_key.stderr
    assert "max_output_chars, solution_dir" in wrong_key.stderr
    wrong_value = tackroom_run("--harness", "oracle", "-O", "max_output_chars=lots")
    assert wrong_value.returncode == 2 and "max_output_chars" in wrong_value.stderr, wrong_value.stderr
    no_value = tackroom_run("-O", "max_output_chars")
    assert no_value.returncode == 2 and "expected KEY=VALUE" in no_value.stderr, no_value.stderr
    assert not Path(out).exists()
    ok = tackroom_run("--harness", "oracle", "-O", "max_output_chars=7", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["trials"][0]["reward"] == 1.0
    config = json.loads(next(Path(out).glob("*/run.json")).read_text())
    assert config["harness"] == {"name": "oracle", "max_output_chars": 7}
