"""Tasks for the opencode tests (a module of its own: ``conftest`` is a name every plugin's tests share, so tests
import from here)."""

from pathlib import Path

from tackroom import testing

EXAMPLES = Path(__file__).resolve().parents[4] / "examples" / "tasks"


def write_task(root: Path, name: str, *, instruction: str, test_sh: str, timeout_sec: float = 120) -> Path:
    """A Harbor-style task directory."""
    return testing.write_task(root, name, instruction=instruction, test_sh=test_sh, agent_timeout_sec=timeout_sec)
