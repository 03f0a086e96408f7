"""Every hook spec is documented (docstring + docs/hooks.md) and exercised by a test (datasette's rule)."""

import inspect
import re
from pathlib import Path

import pytest

from tackroom import _hookspecs as hookspecs

REPO = Path(__file__).resolve().parents[2]
HOOKS = [name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("tackroom_")]


def test_there_are_hooks():
    assert {"tackroom_harnesses", "tackroom_sandboxes", "tackroom_verifiers", "tackroom_losses",
            "tackroom_trial_started", "tackroom_trial_finished", "tackroom_classify_error"} <= set(HOOKS)


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_has_a_docstring(hook):
    doc = inspect.getdoc(getattr(hookspecs, hook)) or ""
    assert "Called" in doc, f"{hook}'s docstring must say when it is called"


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_is_in_the_docs(hook):
    docs = (REPO / "docs" / "hooks.md").read_text()
    assert f"## {hook}" in docs, f"docs/hooks.md needs a '## {hook}' section"


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_has_a_test(hook):
    tests = [p for p in REPO.glob("**/test_*.py") if ".venv" not in p.parts and p.name != "test_hook_docs.py"]
    assert any(re.search(rf"def test_\w*{hook}", p.read_text()) for p in tests), f"no test function mentions {hook} in its name"
