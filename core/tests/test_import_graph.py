"""Core's import graph has no cycle, counting imports inside functions (a lazy import is still an edge;
only ``if TYPE_CHECKING:`` blocks are left out) and the ``__init__`` of a subpackage that an import from
outside it runs (``import tackroom.pkg.mod`` runs ``tackroom/pkg/__init__.py`` first). A cycle held together
by a lazy import means a shared thing lives in the wrong module: move it into a leaf module instead."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tackroom

CORE = Path(tackroom.__file__).resolve().parent


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported(tree: ast.AST, name: str, is_package: bool, modules: set[str], type_checking: bool = False) -> set[str]:
    """The core modules ``name`` imports anywhere (functions included), outside ``if TYPE_CHECKING:`` unless
    ``type_checking``."""
    found: set[str] = set()
    package = name if is_package else name.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and is_type_checking(node.test) and not type_checking:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in modules:
                    found.add(sub)
                elif target in modules:
                    found.add(target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    for module in list(found):  # the subpackages an import from outside them initialises on the way
        parts = module.split(".")
        found.update(p for p in (".".join(parts[:i]) for i in range(2, len(parts)))
                     if p in modules and not (name == p or name.startswith(p + ".")))
    found.discard(name)
    return found


def import_graph(root: Path, type_checking: bool = False) -> dict[str, set[str]]:
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    modules = set(files)
    return {name: imported(ast.parse(path.read_text(), str(path)), name, path.name == "__init__.py", modules,
                           type_checking) for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def describe(component: list[str], graph: dict[str, set[str]]) -> str:
    inside = set(component)
    return "\n".join(f"  {m} -> {', '.join(sorted(graph[m] & inside))}" for m in component)


def test_core_has_no_import_cycle():
    graph = import_graph(CORE)
    found = cycles(graph)
    assert not found, "import cycles in core (lazy imports count):\n" + "\n\n".join(describe(c, graph) for c in found)


def test_the_scan_sees_lazy_imports_and_skips_type_checking_ones(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import C\n"
                              "def f():\n    from pkg import b\n")
    (pkg / "b.py").write_text("from .a import f\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    graph = import_graph(pkg)
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.a"} and graph["pkg.c"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
    assert import_graph(pkg, type_checking=True)["pkg.a"] == {"pkg.b", "pkg.c"}
    assert cycles(import_graph(pkg, type_checking=True)) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_the_scan_counts_the_init_of_a_subpackage_imported_from_outside(tmp_path):
    """The cycle the executor base once closed: the registrar imported ``executors.base``, which ran
    ``executors/__init__``, which reached the plugin manager, which imports the registrar."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "registrar.py").write_text("from pkg.sub.base import Base\n")
    (pkg / "manager.py").write_text("from pkg.registrar import Base\n")
    (pkg / "sub" / "__init__.py").write_text("def f():\n    from pkg import manager\n")
    (pkg / "sub" / "base.py").write_text("from pkg.sub import f\nclass Base: ...\n")
    graph = import_graph(pkg)
    assert graph["pkg.registrar"] == {"pkg.sub.base", "pkg.sub"}
    assert graph["pkg.sub.base"] == {"pkg.sub"}, "inside the subpackage its __init__ is already running"
    assert cycles(graph) == [["pkg.manager", "pkg.registrar", "pkg.sub", "pkg.sub.base"]]


def test_the_executor_is_a_plugin_kind_reached_without_the_public_executors_module():
    """The registrar knows every kind by its ``kind`` attribute and imports no base class; the executor base
    is a core module of its own, and the public ``tackroom.executors`` is a door nothing in core goes through."""
    graph = import_graph(CORE)
    assert "tackroom._executor" not in graph["tackroom._registrar"] | graph["tackroom._manager"]
    assert not {m for m, deps in graph.items() if "tackroom.executors" in deps}


def test_registration_is_in_no_cycle_even_counting_type_checking_imports():
    """A loop held together by ``if TYPE_CHECKING:`` is a shared type in the wrong module: the registrar, the
    manager, the plugin kinds and the executor base annotate with each other's types in one direction only."""
    registration = {"tackroom._registrar", "tackroom._manager", "tackroom._plugin", "tackroom._capability",
                    "tackroom._executor", "tackroom._hookspecs", "tackroom._resolve", "tackroom.executors"}
    graph = import_graph(CORE, type_checking=True)
    found = [c for c in cycles(graph) if registration & set(c)]
    assert not found, "\n\n".join(describe(c, graph) for c in found)


def outside_imports(root: Path, prefixes: tuple[str, ...]) -> list[str]:
    """``file:line: module`` for every import (lazy ones included) of a module starting with one of ``prefixes``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{path.relative_to(root)}:{node.lineno}: {n}" for n in names
                      if any(n == p or n.startswith(p + ".") for p in prefixes)]
    return found


def test_core_imports_nothing_from_the_sandbox_kit_the_app_or_a_plugin():
    """tackroom-sandbox-kit depends on core, never the other way: core's ``Sandbox`` opens no forward and moves no
    tar (plugins hold the kit's ``NamespacePorts`` or mix ``TarTransfer`` in). Likewise tackroom-app, the drivers'
    half: it builds on core, and core reaches none of it."""
    found = outside_imports(CORE, ("tackroom_sandbox_kit", "tackroom_local", "tackroom_docker", "tackroom_app"))
    assert not found, "core imports these:\n" + "\n".join(found)


def test_the_outside_scan_sees_lazy_imports(tmp_path):
    (tmp_path / "m.py").write_text("import os\ndef f():\n    from tackroom_sandbox_kit.process import run_process\n"
                                   "import tackroom_sandbox_kit_other\n")
    assert outside_imports(tmp_path, ("tackroom_sandbox_kit",)) == ["m.py:3: tackroom_sandbox_kit.process"]


async def test_core_sandboxes_forward_no_port_unless_they_say_how():
    class Bare(tackroom.Sandbox):
        async def start(self): ...
        async def exec(self, cmd, **kw): ...
        async def upload(self, source, dest, **kw): ...
        async def download(self, source, dest, **kw): ...
        async def stop(self): ...

    bare = Bare(tackroom.SandboxSpec(name="t"))
    assert not hasattr(bare, "_open_forward") and not hasattr(bare, "_close_forwards")
    with pytest.raises(NotImplementedError, match="Bare cannot forward a host port into the sandbox"):
        await bare.forward_host_port(8000)
