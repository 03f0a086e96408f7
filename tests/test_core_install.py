"""``pip install ./core ./packages/app``: a small venv holding the plugin contract, the runtime and the built-ins
(core) and the ``tackroom`` command (tackroom-app); no sandbox: the default, ``local``, is tackroom-local, and
`tackroom run` says how to install it."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAX_VENV_MB = 60
HEAVY = ("transformers", "tokenizers", "gguf", "torch", "uvicorn", "starlette", "jinja2", "ray", "uvloop", "httptools")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=600)


def size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) / 2**20


@pytest.mark.slow
def test_core_and_the_app_are_a_small_venv_that_lists_the_built_ins(tmp_path):
    uv = shutil.which("uv")
    assert uv, "uv is needed to build the fresh venv (pip install uv)"
    venv = tmp_path / "venv"
    assert run(uv, "venv", "--python", "3.12", str(venv)).returncode == 0
    py = str(venv / "bin" / "python")
    installed = run(uv, "pip", "install", "--python", py, str(REPO / "core"), str(REPO / "packages" / "app"))
    assert installed.returncode == 0, installed.stderr

    listed = run(uv, "pip", "list", "--python", py, "--format", "json")
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert not names & set(HEAVY), f"core pulled in {sorted(names & set(HEAVY))}"
    assert size_mb(venv) < MAX_VENV_MB, f"the core and app venv is {size_mb(venv):.0f} MB"

    plugins = run(str(venv / "bin" / "tackroom"), "plugins", "--json")
    assert plugins.returncode == 0, plugins.stderr
    assert {(r["kind"], r["name"]) for r in json.loads(plugins.stdout)} == {
        ("harness", "oracle"), ("harness", "nop"),
        ("verifier", "test-script"), ("executor", "asyncio")}
    imported = run(py, "-c", "import sys, tackroom, tackroom_app, tackroom.executors, tackroom.testing\n"
                              "print(sorted({m.split('.')[0] for m in sys.modules}))")
    assert imported.returncode == 0, imported.stderr
    loaded = set(json.loads(imported.stdout.replace("'", '"')))
    assert not loaded & set(HEAVY), f"import tackroom loaded {sorted(loaded & set(HEAVY))}"

    trial = subprocess.run([str(venv / "bin" / "tackroom"), "run", str(REPO / "examples/tasks/hello-file"),
                            "--out", str(tmp_path / "runs")], capture_output=True, text=True, timeout=120,
                           env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "300"})
    message = " ".join((trial.stdout + trial.stderr).split())
    assert trial.returncode == 2 and "no sandbox named 'local' is installed" in message, message
    assert ("'local' is provided by tackroom-local: pip install ./packages/sandbox-kit ./plugins/sandboxes/local"
            in message), message


@pytest.mark.slow
def test_the_plugin_authors_wheels_install_core_and_the_default_sandbox(tmp_path):
    """docs/writing-plugins.md, "Install tackroom to write against": the workspace builds as wheels, and core plus
    the default sandbox install from them alone (no index holds tackroom) and run a trial."""
    uv = shutil.which("uv")
    assert uv, "uv is needed (pip install uv)"
    dist = tmp_path / "dist"
    for package in ("tackroom", "tackroom-app", "tackroom-sandbox-kit", "tackroom-local"):
        built = run(uv, "build", "--directory", str(REPO), "--package", package, "--wheel", "-o", str(dist))
        assert built.returncode == 0, built.stderr
    venv = tmp_path / "venv"
    assert run(uv, "venv", "--python", "3.12", str(venv)).returncode == 0
    installed = run(uv, "pip", "install", "--python", str(venv / "bin" / "python"), "--find-links", str(dist),
                    "tackroom", "tackroom-app", "tackroom-local")
    assert installed.returncode == 0, installed.stderr
    trial = subprocess.run([str(venv / "bin" / "tackroom"), "run", str(REPO / "examples/tasks/hello-file"),
                            "--out", str(tmp_path / "runs"), "--json"], capture_output=True, text=True, timeout=300,
                           env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "300"})
    assert trial.returncode == 0, trial.stderr
    assert json.loads(trial.stdout)["trials"][0]["reward"] == 1.0
