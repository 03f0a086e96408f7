"""Where the archipelago tests' material lives (a module of its own: ``conftest`` is a name every plugin's tests
share, so tests import from here)."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
WORLD = REPO / "examples" / "worlds" / "acme"
TASKS = WORLD / "tasks"
