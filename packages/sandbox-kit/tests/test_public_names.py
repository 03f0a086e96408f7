"""The kit's public names: each documented, and each name CHANGELOG.md says moved out of ``tackroom`` is here and
no longer there (so the migration line it prints is one that works)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import tackroom
import tackroom_sandbox_kit

CHANGELOG = Path(__file__).resolve().parents[3] / "CHANGELOG.md"
MOVED = re.compile(r"^\s*\| `from tackroom import (\w+)` \| `from tackroom_sandbox_kit import (\w+)` \|$", re.M)


def test_every_public_name_exists_and_is_documented():
    undocumented = [name for name in tackroom_sandbox_kit.__all__
                    if (inspect.isclass(value := getattr(tackroom_sandbox_kit, name)) or inspect.isfunction(value))
                    and not inspect.getdoc(value)]
    assert not undocumented, f"public names without a docstring: {undocumented}"


def test_each_name_the_changelog_moves_is_in_the_kit_and_gone_from_tackroom():
    moved = MOVED.findall(CHANGELOG.read_text())
    assert len(moved) >= 15, "CHANGELOG.md's table of names moved to tackroom_sandbox_kit was not found"
    for was, now in moved:
        assert was == now and now in tackroom_sandbox_kit.__all__, now
        assert not hasattr(tackroom, was) and was not in tackroom.__all__, f"tackroom still exports {was}"
