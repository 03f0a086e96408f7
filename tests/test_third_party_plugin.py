"""A third-party plugin, installed with pip into a fresh venv next to tackroom, is found and selectable."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HELLO = REPO / "examples" / "plugins" / "tackroom-hello"


def run(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=600, **kw)


@pytest.mark.slow
def test_hello_plugin_installs_lists_loads_and_uninstalls(tmp_path):
    uv = shutil.which("uv")
    assert uv, "uv is needed to build the fresh venv (pip install uv)"
    venv = tmp_path / "venv"
    made = run(uv, "venv", "--python", "3.12", str(venv))
    assert made.returncode == 0, made.stderr
    py = str(venv / "bin" / "python")
    tackroom_cli = str(venv / "bin" / "tackroom")
    installed = run(uv, "pip", "install", "--python", py, str(REPO / "core"), str(REPO / "packages" / "app"),
                    str(HELLO))
    assert installed.returncode == 0, installed.stderr

    listed = run(tackroom_cli, "plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    hello = [r for r in json.loads(listed.stdout) if r["name"] == "hello"]
    assert hello and hello[0]["kind"] == "harness" and hello[0]["distribution"] == "tackroom-hello"
    assert hello[0]["version"] == "0.1.0"

    config = tmp_path / "run.toml"
    config.write_text('[harness]\nname = "hello"\ngreeting = "hi there"\n')
    load = (
        "import sys, tackroom_app; c = tackroom_app.load_run_config(sys.argv[1]); "
        "h = tackroom_app.instantiate('harness', c.harness); print(type(h).__name__, h.options.greeting)"
    )
    loaded = run(py, "-c", load, str(config))
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "HelloHarness hi there"

    bad = tmp_path / "bad.toml"
    bad.write_text('[harness]\nname = "hello"\ngreting = "typo"\n')
    rejected = run(py, "-c", load, str(bad))
    assert rejected.returncode != 0 and "harness.greting: unknown field" in rejected.stderr

    removed = run(uv, "pip", "uninstall", "--python", py, "tackroom-hello")
    assert removed.returncode == 0, removed.stderr
    after = json.loads(run(tackroom_cli, "plugins", "--json").stdout)
    assert "hello" not in [r["name"] for r in after]
    gone = run(py, "-c", load, str(config))
    assert gone.returncode != 0
    assert "pip install ./examples/plugins/tackroom-hello" in gone.stderr
