"""The public API is the only door: plugins and packages, their tests included, reach ``tackroom``,
``tackroom.testing``, ``tackroom.executors``, ``tackroom.app`` (and ``python -m tackroom``), never another
``tackroom.<module>`` (those are private)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import tackroom
import tackroom.app
import tackroom.executors

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = {"tackroom", "tackroom.testing", "tackroom.executors", "tackroom.app", "tackroom.__main__"}

SOURCES = sorted([*ROOT.glob("plugins/*/*/src/**/*.py"), *ROOT.glob("packages/*/src/**/*.py")])
TESTS = sorted([*ROOT.glob("plugins/*/*/tests/**/*.py"), *ROOT.glob("packages/*/tests/**/*.py")])


def _private(module: str) -> bool:
    return (module == "tackroom" or module.startswith("tackroom.")) and module not in PUBLIC


def _code_in(text: str) -> ast.AST | None:
    """``text`` parsed as Python when it holds an import (the code a test hands ``python -c`` or writes to a file)."""
    if "import" not in text:
        return None
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


def _private_names(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if _private(node.module):
                found.append((node.lineno, node.module))
            elif node.module in PUBLIC:  # from tackroom import _something
                found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names
                          if alias.name.startswith("_") and not alias.name.startswith("__")]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if _private(alias.name)]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "tackroom"
              and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append((node.lineno, f"tackroom.{node.attr}"))  # tackroom._runtime, loaded by someone else
        elif isinstance(node, (ast.List, ast.Tuple, ast.Call)):
            items = node.args if isinstance(node, ast.Call) else node.elts
            texts = [i.value if isinstance(i, ast.Constant) and isinstance(i.value, str) else None for i in items]
            found += [(node.lineno, module) for flag, module in zip(texts, texts[1:])  # python -m tackroom._cli.main
                      if flag == "-m" and module and _private(module)]
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "setattr" \
                    and texts and texts[0] and _private(texts[0].rsplit(".", 1)[0]):
                found.append((node.lineno, texts[0]))  # monkeypatch.setattr("tackroom._manager._manager", ...)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (code := _code_in(node.value)):
            found += [(node.lineno, module) for _, module in _private_names(code)]
    return found


def private_imports(path: Path) -> list[str]:
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return [f"{where}:{line}: {module}" for line, module in sorted(_private_names(ast.parse(path.read_text(), str(path))))]


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


def test_the_scan_finds_private_modules_reached_without_an_import_statement(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import subprocess, sys, tackroom\n"
        "subprocess.run([sys.executable, '-m', 'tackroom._cli.main', 'run'])\n"
        "subprocess.run([sys.executable, '-c', 'import sys, tackroom._cli.main'])\n"
        "def test(monkeypatch):\n"
        "    monkeypatch.setattr('tackroom._manager._manager', None)\n"
        "    monkeypatch.setattr(tackroom._runtime, 'write', None)\n"
        "LABEL = 'tackroom._trial'\n"  # a container label that happens to look like a module: not an import
        "subprocess.run([sys.executable, '-m', 'tackroom', 'run'])\n"
        "print(tackroom.__version__)\n"
        "from tackroom.app import _secret, __version__\n")
    assert [line.split(": ")[1] for line in private_imports(probe)] == [
        "tackroom._cli.main", "tackroom._cli.main", "tackroom._manager._manager", "tackroom._runtime",
        "tackroom.app._secret"]


def test_there_are_plugins_and_packages_to_check():
    assert {p.relative_to(ROOT).parts[0] for p in SOURCES} == {"plugins", "packages"}
    assert {p.relative_to(ROOT).parts[0] for p in TESTS} == {"plugins", "packages"}
    assert len(SOURCES) > 50 and len(TESTS) > 50


def test_no_plugin_or_package_imports_a_private_tackroom_module():
    found = [hit for path in SOURCES for hit in private_imports(path)]
    assert not found, "import these from tackroom / tackroom.app / tackroom.executors instead:\n" + "\n".join(found)


def test_no_plugin_or_package_test_reaches_a_private_tackroom_module():
    """A plugin's tests are examples of use: they show the public way (``python -m tackroom``, a built-in by name
    through ``tackroom.app.instantiate`` or ``PluginManager.get``, the process-wide manager reset, not replaced)."""
    found = [hit for path in TESTS for hit in private_imports(path)]
    assert not found, ("use tackroom / tackroom.app / tackroom.executors / tackroom.testing / python -m tackroom "
                       "instead:\n" + "\n".join(found))


FOR_PLUGIN_AUTHORS = {
    "Plugin", "PluginOptions", "PluginSpec", "Capability", "Harness", "SandboxProvider", "Verifier", "LossSpec",
    "Aggregation", "AGGREGATIONS", "hookimpl", "Registrar", "Task", "Policy", "Sandbox", "SandboxSpec", "ExecResult",
    "DEFAULT_EXEC_TIMEOUT", "Trajectory", "TokenTurn", "Reward", "Trial", "TrialResult", "ErrorClass", "TackroomError",
    "ConfigError", "PluginDefinitionError", "InfraError", "ModelError", "TaskError", "SandboxError",
    "SandboxBuildError", "SandboxTimeoutError", "SandboxPathError", "GradingSabotagedError", "GraderBrokenError",
    "check_relative_inside", "openai_error_message", "redact", "redact_url", "register_secret",
    "register_url_secrets", "cache_root", "load_task", "__version__", "NetworkPolicy", "NetworkMode",
    "GRADER_SCRUBBED_ENV", "GRADER_CLEAN_ENV", "SandboxExhaustedError", "PolicySession", "LazyExports",
}
"""``tackroom``: what a plugin needs to be written, registered, and to fail the way the runtime expects."""

FOR_DRIVERS = {
    "PluginManager", "PluginEntry", "PluginKind", "PLUGIN_KINDS", "get_plugin_manager", "reset_plugin_manager",
    "instantiate", "PluginNotFoundError", "PluginConflictError", "PluginIncompatibleError", "RunConfig",
    "PluginSelection", "RuntimeConfig", "TaskSelection", "ExecutorName", "Endpoint", "load_run_config",
    "resolve_runtime", "read_toml", "validate", "with_overrides", "format_validation_error", "FieldError",
    "register_secrets_in", "load_dataset", "Dataset", "TaskLoadFailure", "TrialRuntime", "TrialPlugins",
    "TrialErrorInfo", "run_config", "policy_routing", "policy_gateway", "gateway_sessions", "wants_gateway",
    "sandbox_spec", "claim_run_dir", "has_results", "task_changes", "tasks_fingerprint", "unique_trials",
    "validated_run_id", "slug", "run_to_completion", "print_error", "TERMINATED_EXIT_CODE", "INTERRUPTED_EXIT_CODE",
    "NetworkDefaults",
}
"""``tackroom.app``: what an application that runs trials needs beyond ``tackroom`` (whose values it passes on)."""

FOR_EXECUTOR_AUTHORS = {
    "Executor", "NoOptions", "AsyncioExecutor", "AttemptPlan", "PluginRef", "run_attempt", "import_ref",
    "make_executor", "ExecutorNotFoundError", "ExecutorUnavailableError",
}
"""``tackroom.executors``: the interface, what it runs, and choosing one by name."""

DECLARED = {tackroom: FOR_PLUGIN_AUTHORS, tackroom.app: FOR_DRIVERS, tackroom.executors: FOR_EXECUTOR_AUTHORS}
PUBLIC_MODULES = {"app", "executors", "testing"}


def undeclared(module, declared: set[str]) -> dict[str, set[str]]:
    """What ``module`` shows that ``declared`` does not list, and what it lists that the module lacks: a public
    name is one without a leading ``_`` (a public submodule aside), whether ``__all__`` has it or not."""
    shown = {n for n in vars(module) if not n.startswith("_") and n not in PUBLIC_MODULES} | set(module.__all__)
    return {"not declared": shown - declared, "declared but missing": declared - shown,
            "not in __all__": declared - set(module.__all__)}


@pytest.mark.parametrize("module", list(DECLARED), ids=lambda m: m.__name__)
def test_each_public_module_shows_exactly_its_declared_names(module):
    """A name added to ``tackroom``, ``tackroom.app`` or ``tackroom.executors`` (an import, a helper, a constant)
    is public API: this fails until it is declared above, or renamed with a leading ``_``."""
    problems = {k: v for k, v in undeclared(module, DECLARED[module]).items() if v}
    assert not problems, f"{module.__name__}: {problems}"


def test_no_name_is_public_in_two_places():
    """One door per name: a value passed between plugins and drivers is ``tackroom``'s, not re-exported."""
    pairs = [(a, b) for a in DECLARED for b in DECLARED if a.__name__ < b.__name__]
    shared = {f"{a.__name__} & {b.__name__}": DECLARED[a] & DECLARED[b] - {"__version__"} for a, b in pairs}
    assert not any(shared.values()), shared


def test_the_guard_sees_a_name_added_without_being_declared(monkeypatch):
    monkeypatch.setattr(tackroom.app, "helper_nobody_declared", lambda: None, raising=False)
    monkeypatch.setattr(tackroom.app, "_private_helper", lambda: None, raising=False)
    assert undeclared(tackroom.app, FOR_DRIVERS)["not declared"] == {"helper_nobody_declared"}
    assert undeclared(tackroom, FOR_PLUGIN_AUTHORS | {"Extra"})["declared but missing"] == {"Extra"}


@pytest.mark.parametrize("module", [tackroom, tackroom.app, tackroom.executors], ids=lambda m: m.__name__)
def test_every_public_name_exists_and_is_documented(module):
    undocumented = []
    for name in module.__all__:
        value = getattr(module, name)  # AttributeError: listed but not there
        if (inspect.isclass(value) or inspect.isfunction(value)) and not inspect.getdoc(value):
            undocumented.append(name)
    assert not undocumented, f"{module.__name__}: public names without a docstring: {undocumented}"
