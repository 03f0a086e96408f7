"""The public API is the only door: plugins and packages, their tests included, reach ``tackroom``,
``tackroom.testing``, ``tackroom.executors`` and the driver API ``tackroom_app`` (and ``python -m tackroom_app``),
never another ``tackroom.<module>`` or ``tackroom_app.<module>`` (those are private). tackroom-app's own sources
are the one exception: they are core's driver half, released with it."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import tackroom
import tackroom.executors
import tackroom.grading
import tackroom.sandbox_features
import tackroom.services
import tackroom_app

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = {"tackroom", "tackroom.testing", "tackroom.executors", "tackroom.services", "tackroom.grading", "tackroom.sandbox_features", "tackroom_app", "tackroom_app.__main__"}
GUARDED = ("tackroom", "tackroom_app")
"""The distributions whose modules other than :data:`PUBLIC` are private."""
APP = ROOT / "packages" / "app"
"""tackroom-app: the driver half of core (the ``tackroom`` command, run folders, policy routing, the driver API),
pinned to core's version. Its sources build on core's private modules; its tests, like every package's, use the
public doors of core (they may reach their own package's modules)."""

SOURCES = sorted([*ROOT.glob("plugins/*/*/src/**/*.py"), *ROOT.glob("packages/*/src/**/*.py")])
TESTS = sorted([*ROOT.glob("plugins/*/*/tests/**/*.py"), *ROOT.glob("packages/*/tests/**/*.py")])


def _private(module: str, allowed: frozenset[str] = frozenset()) -> bool:
    """Whether ``module`` is a private module of a :data:`GUARDED` distribution other than those ``allowed``."""
    root = module.partition(".")[0]
    return root in GUARDED and root not in allowed and module not in PUBLIC


def allowed_roots(path: Path) -> frozenset[str]:
    """Whose private modules ``path`` may reach: tackroom-app's files their own; its sources core's too."""
    if not path.is_relative_to(APP):
        return frozenset()
    return frozenset({"tackroom_app", "tackroom"}) if path.is_relative_to(APP / "src") else frozenset({"tackroom_app"})


def _code_in(text: str) -> ast.AST | None:
    """``text`` parsed as Python when it holds an import (the code a test hands ``python -c`` or writes to a file)."""
    if "import" not in text:
        return None
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


def _private_names(tree: ast.AST, allowed: frozenset[str] = frozenset()) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if _private(node.module, allowed):
                found.append((node.lineno, node.module))
            elif node.module in PUBLIC and node.module.partition(".")[0] not in allowed:  # from tackroom import _x
                found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names
                          if alias.name.startswith("_") and not alias.name.startswith("__")]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if _private(alias.name, allowed)]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in GUARDED
              and node.value.id not in allowed and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))  # tackroom._runtime, loaded by someone else
        elif isinstance(node, (ast.List, ast.Tuple, ast.Call)):
            items = node.args if isinstance(node, ast.Call) else node.elts
            texts = [i.value if isinstance(i, ast.Constant) and isinstance(i.value, str) else None for i in items]
            found += [(node.lineno, module) for flag, module in zip(texts, texts[1:])  # python -m tackroom._cli.main
                      if flag == "-m" and module and _private(module, allowed)]
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "setattr" \
                    and texts and texts[0] and _private(texts[0].rsplit(".", 1)[0], allowed):
                found.append((node.lineno, texts[0]))  # monkeypatch.setattr("tackroom._manager._manager", ...)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (code := _code_in(node.value)):
            found += [(node.lineno, module) for _, module in _private_names(code, allowed)]
    return found


def private_imports(path: Path) -> list[str]:
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    tree = ast.parse(path.read_text(), str(path))
    return [f"{where}:{line}: {module}" for line, module in sorted(_private_names(tree, allowed_roots(path)))]


@pytest.mark.parametrize("package", [tackroom, tackroom_app], ids=lambda m: m.__name__)
def test_every_module_outside_the_public_api_is_underscored(package):
    """As Inspect AI does: what is not public says so in its name (``tackroom._runtime``, ``tackroom_app._cli``)."""
    folder = Path(package.__file__).parent
    public = {name.split(".")[1] for name in PUBLIC if name.startswith(f"{package.__name__}.")}
    named = {p.stem if p.is_file() else p.name for p in folder.iterdir()
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
        "from tackroom_app import _secret, __version__\n"
        "subprocess.run([sys.executable, '-m', 'tackroom_app._cli.main', 'run'])\n"
        "subprocess.run([sys.executable, '-m', 'tackroom_app', 'run'])\n")
    assert [line.split(": ")[1] for line in private_imports(probe)] == [
        "tackroom._cli.main", "tackroom._cli.main", "tackroom._manager._manager", "tackroom._runtime",
        "tackroom_app._secret", "tackroom_app._cli.main"]


def test_only_tackroom_app_sources_reach_cores_private_modules(tmp_path):
    code = "import tackroom._runtime\nfrom tackroom_app._run import run_config\n"
    app_source, app_test, other = APP / "src" / "tackroom_app", APP / "tests", tmp_path
    assert allowed_roots(app_source / "x.py") == {"tackroom", "tackroom_app"}
    assert allowed_roots(app_test / "x.py") == {"tackroom_app"}
    assert allowed_roots(other / "x.py") == set()
    tree = ast.parse(code)
    assert _private_names(tree, allowed_roots(app_source / "x.py")) == []
    assert [m for _, m in _private_names(tree, allowed_roots(app_test / "x.py"))] == ["tackroom._runtime"]
    assert [m for _, m in _private_names(tree)] == ["tackroom._runtime", "tackroom_app._run"]


def test_there_are_plugins_and_packages_to_check():
    assert {p.relative_to(ROOT).parts[0] for p in SOURCES} == {"plugins", "packages"}
    assert {p.relative_to(ROOT).parts[0] for p in TESTS} == {"plugins", "packages"}
    assert len(SOURCES) > 50 and len(TESTS) > 50


def test_no_plugin_or_package_imports_a_private_tackroom_module():
    found = [hit for path in SOURCES for hit in private_imports(path)]
    assert not found, "import these from tackroom / tackroom_app / tackroom.executors instead:\n" + "\n".join(found)


def test_no_plugin_or_package_test_reaches_a_private_tackroom_module():
    """A plugin's tests are examples of use: they show the public way (``python -m tackroom_app``, a built-in by
    name through ``tackroom_app.instantiate`` or ``PluginManager.get``, the process-wide manager reset, not replaced)."""
    found = [hit for path in TESTS for hit in private_imports(path)]
    assert not found, ("use tackroom / tackroom_app / tackroom.executors / tackroom.testing / python -m tackroom_app "
                       "instead:\n" + "\n".join(found))


FOR_PLUGIN_AUTHORS = {
    "Plugin", "PluginOptions", "PluginSpec", "Capability", "Harness", "SandboxProvider", "Verifier", "LossSpec",
    "Aggregation", "AGGREGATIONS", "hookimpl", "Registrar", "Task", "Policy", "Sandbox", "SandboxSpec", "ExecResult",
    "DEFAULT_EXEC_TIMEOUT", "Trajectory", "TokenTurn", "Reward", "Trial", "TrialResult", "ErrorClass", "TackroomError",
    "ConfigError", "PluginDefinitionError", "InfraError", "ModelError", "TaskError", "SandboxError",
    "SandboxBuildError", "SandboxTimeoutError", "SandboxPathError", "GradingSabotagedError", "GraderBrokenError",
    "check_relative_inside", "cache_root", "load_task", "__version__", "NetworkPolicy", "NetworkMode",
    "SandboxExhaustedError", "PolicySession", "LazyExports",
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
    "validated_run_id", "slug", "run_to_completion", "print_error", "command_console", "TERMINATED_EXIT_CODE",
    "INTERRUPTED_EXIT_CODE",
    "NetworkDefaults", "refuse_unrunnable",
}
"""``tackroom_app``: what an application that runs trials needs beyond ``tackroom`` (whose values it passes on)."""

FOR_EXECUTOR_AUTHORS = {
    "Executor", "NoOptions", "AsyncioExecutor", "AttemptPlan", "PluginRef", "run_attempt", "import_ref",
    "make_executor", "ExecutorNotFoundError", "ExecutorUnavailableError",
}
"""``tackroom.executors``: the interface, what it runs, and choosing one by name."""

FOR_SERVICE_CALLERS = {"openai_error_message", "redact", "redact_url", "register_secret", "register_url_secrets"}
"""``tackroom.services``: a service's error text and secrets kept off disk, for plugins that call one."""

FOR_SANDBOX_AUTHORS = {"GRADER_SCRUBBED_ENV", "GRADER_CLEAN_ENV"}
"""``tackroom.grading``: the environment the grader's command starts with, for sandbox plugins."""

FOR_FEATURE_CHECKS = {"NetworkSwitch", "ServiceKeeper", "ToolRestorer", "PortForwarder", "PortExposer", "ReadOnlyMounts"}
"""``tackroom.sandbox_features``: optional sandbox features, checked with ``isinstance``."""

DECLARED = {tackroom: FOR_PLUGIN_AUTHORS, tackroom_app: FOR_DRIVERS, tackroom.executors: FOR_EXECUTOR_AUTHORS,
            tackroom.services: FOR_SERVICE_CALLERS, tackroom.grading: FOR_SANDBOX_AUTHORS,
            tackroom.sandbox_features: FOR_FEATURE_CHECKS}
PUBLIC_MODULES = {"executors", "testing", "services", "grading", "sandbox_features"}
MAX_PLUGIN_AUTHOR_NAMES = 45
"""``tackroom``'s ``__all__`` at most: what a plugin author reads first stays one screen (pluggy's has 12)."""


def undeclared(module, declared: set[str]) -> dict[str, set[str]]:
    """What ``module`` shows that ``declared`` does not list, and what it lists that the module lacks: a public
    name is one without a leading ``_`` (a public submodule aside), whether ``__all__`` has it or not."""
    shown = {n for n in vars(module) if not n.startswith("_") and n not in PUBLIC_MODULES} | set(module.__all__)
    return {"not declared": shown - declared, "declared but missing": declared - shown,
            "not in __all__": declared - set(module.__all__)}


@pytest.mark.parametrize("module", list(DECLARED), ids=lambda m: m.__name__)
def test_each_public_module_shows_exactly_its_declared_names(module):
    """A name added to ``tackroom``, ``tackroom_app`` or ``tackroom.executors`` (an import, a helper, a constant)
    is public API: this fails until it is declared above, or renamed with a leading ``_``."""
    problems = {k: v for k, v in undeclared(module, DECLARED[module]).items() if v}
    assert not problems, f"{module.__name__}: {problems}"


def test_no_name_is_public_in_two_places():
    """One door per name: a value passed between plugins and drivers is ``tackroom``'s, not re-exported."""
    pairs = [(a, b) for a in DECLARED for b in DECLARED if a.__name__ < b.__name__]
    shared = {f"{a.__name__} & {b.__name__}": DECLARED[a] & DECLARED[b] - {"__version__"} for a, b in pairs}
    assert not any(shared.values()), shared


@pytest.mark.parametrize("module", list(DECLARED), ids=lambda m: m.__name__)
def test_no_name_is_listed_twice_in_an_all(module):
    twice = sorted({n for n in module.__all__ if module.__all__.count(n) > 1})
    assert not twice, f"{module.__name__}.__all__ lists these more than once: {twice}"


def test_the_plugin_authors_api_stays_small():
    """Counted, not only pinned: a name joins ``tackroom`` only where one leaves, or goes to a named submodule."""
    count = len(tackroom.__all__)
    assert count <= MAX_PLUGIN_AUTHOR_NAMES, (
        f"tackroom exports {count} names, {count - MAX_PLUGIN_AUTHOR_NAMES} over {MAX_PLUGIN_AUTHOR_NAMES}: move "
        "what only some plugins use to a named submodule")


def test_the_guard_sees_a_name_added_without_being_declared(monkeypatch):
    monkeypatch.setattr(tackroom_app, "helper_nobody_declared", lambda: None, raising=False)
    monkeypatch.setattr(tackroom_app, "_private_helper", lambda: None, raising=False)
    assert undeclared(tackroom_app, FOR_DRIVERS)["not declared"] == {"helper_nobody_declared"}
    assert undeclared(tackroom, FOR_PLUGIN_AUTHORS | {"Extra"})["declared but missing"] == {"Extra"}


@pytest.mark.parametrize("module", list(DECLARED), ids=lambda m: m.__name__)
def test_every_public_name_exists_and_is_documented(module):
    undocumented = []
    for name in module.__all__:
        value = getattr(module, name)  # AttributeError: listed but not there
        if (inspect.isclass(value) or inspect.isfunction(value)) and not inspect.getdoc(value):
            undocumented.append(name)
    assert not undocumented, f"{module.__name__}: public names without a docstring: {undocumented}"
