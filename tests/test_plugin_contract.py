"""The versioned plugin contract, as a plugin's author meets it: pip install into a fresh venv, then
`tackroom plugins --json` and `tackroom run`. A harness written for contract 1 is flagged and refused
before any sandbox starts; one written for contract 2 runs as before."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PLUGINS = REPO / "tests" / "plugins"
TASK = REPO / "examples" / "tasks" / "touch-done"


def run(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=600, **kw)


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    uv = shutil.which("uv")
    assert uv, "uv is needed to build the fresh venv (pip install uv)"
    venv = tmp_path_factory.mktemp("contract") / "venv"
    made = run(uv, "venv", "--python", "3.12", str(venv))
    assert made.returncode == 0, made.stderr
    installed = run(uv, "pip", "install", "--python", str(venv / "bin" / "python"), str(REPO / "core"),
                    str(REPO / "packages/sandbox-kit"),  # what the default sandbox builds on (not on an index)
                    str(REPO / "plugins/sandboxes/local"),  # the default sandbox, its own distribution
                    str(PLUGINS / "tackroom-greeter"), str(PLUGINS / "tackroom-toucher"))
    assert installed.returncode == 0, installed.stderr
    return venv


@pytest.mark.slow
def test_plugins_json_flags_the_contract_1_harness_and_keeps_the_current_one(venv):
    listed = run(str(venv / "bin" / "tackroom"), "plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    greeter, toucher = rows["greeter"], rows["toucher"]
    assert (greeter["contract"], greeter["usable"]) == (1, False)
    assert "Harness.run" in greeter["problem"] and "run(instruction, sandbox, policy)" in greeter["problem"]
    assert "tackroom_contract = 3" in greeter["problem"]
    assert (toucher["contract"], toucher["usable"], toucher["problem"]) == (3, True, None)
    assert rows["oracle"]["usable"] and rows["local"]["usable"]

    table = run(str(venv / "bin" / "tackroom"), "plugins", env={"COLUMNS": "400", "PATH": "/usr/bin:/bin"})
    assert table.returncode == 0, table.stderr
    assert "not usable" in table.stdout and "greeter" in table.stdout


@pytest.mark.slow
def test_run_refuses_the_contract_1_harness_before_any_sandbox_starts(venv, tmp_path):
    out = tmp_path / "runs"
    refused = run(str(venv / "bin" / "tackroom"), "run", str(TASK), "--harness", "greeter", "--out", str(out))
    assert refused.returncode != 0
    message = " ".join(refused.stderr.split())
    assert "harness 'greeter' from tackroom-greeter 0.1.0 cannot run" in message
    assert "Harness.run" in message and "run(task, sandbox, policy)" in message
    assert not out.exists(), "refused before a run folder (let alone a sandbox) was made"


@pytest.mark.slow
def test_a_current_third_party_harness_still_runs_and_scores(venv, tmp_path):
    done = run(str(venv / "bin" / "tackroom"), "run", str(TASK), "--harness", "toucher", "--out",
               str(tmp_path / "runs"), "--json")
    assert done.returncode == 0, done.stderr
    trial = json.loads(done.stdout)["trials"][0]
    assert trial["error"] is None and trial["reward"] == 1.0
