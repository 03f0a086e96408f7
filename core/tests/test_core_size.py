"""The cap on core: the ``.py`` lines under ``core/src/tackroom``, ``tackroom.testing`` left out (the
conformance kits are the contract's executable spec and stay whatever their size), docstrings and comments
counted, at most :data:`CAP`. The drivers (the CLI, run folders, policy routing, the driver API) are
tackroom-app's (packages/app), not core's; the cap leaves core room to grow by a few hundred lines written
plainly, not by compressing them. docs/architecture.md ("What core holds") names the cap.
The install size of ``pip install ./core`` (< 60 MB, no heavy package) is tests/test_core_install.py's."""

from __future__ import annotations

from pathlib import Path

import tackroom

CORE = Path(tackroom.__file__).resolve().parent
CAP = 4_900


def lines_of(root: Path, *, without: tuple[str, ...] = ("testing",)) -> int:
    """``wc -l`` over every ``.py`` file below ``root``, except those in the top-level folders ``without``."""
    return sum(len(p.read_bytes().splitlines()) for p in root.rglob("*.py")
               if p.relative_to(root).parts[0] not in without)


def test_the_count_leaves_out_testing_and_nothing_else(tmp_path):
    (tmp_path / "testing").mkdir()
    (tmp_path / "testing" / "kit.py").write_text("a\nb\n")
    (tmp_path / "_cli").mkdir()
    (tmp_path / "_cli" / "main.py").write_text("x\n\n# comment\n")
    (tmp_path / "_runtime.py").write_text('"""doc"""\ny = 1')
    (tmp_path / "notes.md").write_text("not python\n")
    assert lines_of(tmp_path) == 5
    assert lines_of(tmp_path, without=()) == 7


def test_core_without_testing_is_within_the_cap():
    count = lines_of(CORE)
    assert count <= CAP, f"core without testing/ is {count:,} lines, {count - CAP:,} over its cap of {CAP:,}"
