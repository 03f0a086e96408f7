"""The public API is the only door: plugins and packages import ``tackroom``, ``tackroom.testing``,
``tackroom.executors`` and ``tackroom.app``, never another ``tackroom.<module>`` (those are private)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import tackroom
import tackroom.app
import tackroom.executors

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = {"tackroom", "tackroom.testing", "tackroom.executors", "tackroom.app"}

SOURCES = sorted([*ROOT.glob("plugins/*/*/src/**/*.py"), *ROOT.glob("packages/*/src/**/*.py")])


def private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        for module in modules:
            if (module == "tackroom" or module.startswith("tackroom.")) and module not in PUBLIC:
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                found.append(f"{where}:{node.lineno}: {module}")
    return found


def test_every_module_outside_the_public_api_is_underscored():
    """As Inspect AI does: what is not public says so in its name (``tackroom._runtime``, ``tackroom._cli``)."""
    core = Path(tackroom.__file__).parent
    public = {name.split(".")[1] for name in PUBLIC if "." in name}
    named = {p.stem if p.is_file() else p.name for p in core.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").is_file())}
    assert public <= named, f"public modules missing: {public - named}"
    assert not {n for n in named - public if not n.startswith("_")}, "rename these with a leading _ (private)"


def test_the_scan_finds_what_it_looks_for(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import tackroom._runtime\nfrom tackroom._trial import Trial\nfrom tackroom import Task\n"
                     "def f():\n    from tackroom._config import validate\n")
    assert [line.split(": ")[1] for line in private_imports(probe)] == ["tackroom._runtime", "tackroom._trial",
                                                                        "tackroom._config"]


def test_there_are_plugins_and_packages_to_check():
    assert {p.relative_to(ROOT).parts[0] for p in SOURCES} == {"plugins", "packages"}
    assert len(SOURCES) > 50


def test_no_plugin_or_package_imports_a_private_tackroom_module():
    found = [hit for path in SOURCES for hit in private_imports(path)]
    assert not found, "import these from tackroom / tackroom.app / tackroom.executors instead:\n" + "\n".join(found)


@pytest.mark.parametrize("module", [tackroom, tackroom.app, tackroom.executors], ids=lambda m: m.__name__)
def test_every_public_name_exists_and_is_documented(module):
    undocumented = []
    for name in module.__all__:
        value = getattr(module, name)  # AttributeError: listed but not there
        if (inspect.isclass(value) or inspect.isfunction(value)) and not inspect.getdoc(value):
            undocumented.append(name)
    assert not undocumented, f"{module.__name__}: public names without a docstring: {undocumented}"
