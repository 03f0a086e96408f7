"""Lint as a habit: ``ruff check`` (its config is in the root pyproject.toml) passes on the whole repository."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ruff() -> list[str]:
    exe = Path(sys.executable).with_name("ruff")
    if exe.is_file():
        return [str(exe)]
    found = shutil.which("ruff")
    assert found, "ruff is not installed: it is in the workspace's dev dependencies (uv sync)"
    return [found]


def test_ruff_check_passes_on_the_repository():
    out = subprocess.run([*ruff(), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]


def test_ruff_catches_what_it_is_configured_to_catch(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nimport sys  # noqa: E999\n\n\ndef f(x=[]):\n    return x\n")
    out = subprocess.run([*ruff(), "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(bad)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    for code in ("F401", "B006", "RUF100"):
        assert code in out.stdout, out.stdout
