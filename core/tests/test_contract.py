"""The versioned plugin contract: declared versions, signature checks on load, and what a refusal says."""

import sys
import types
from importlib.metadata import EntryPoint

import pytest

import tackroom
import tackroom.executors
import tackroom_app
from tackroom._contract import CHANGES, CONTRACT_VERSION, METHODS, declared_contract_problem, signature_problem
from tackroom._errors import PluginIncompatibleError, PluginNotFoundError
from tackroom._manager import PluginManager


def plugin_module(name: str, contract=None, **hooks) -> types.ModuleType:
    mod = types.ModuleType(name)
    if contract is not None:
        mod.tackroom_contract = contract
    for hook_name, fn in hooks.items():
        setattr(mod, hook_name, tackroom.hookimpl(fn))
    return mod


class OldHarness(tackroom.Harness):
    """Written for contract 1: run received the instruction text."""

    name = "old"

    async def run(self, instruction, sandbox, policy):
        return tackroom.Trajectory(final_answer=instruction)


class NewHarness(tackroom.Harness):
    """Written for contract 2."""

    name = "new"

    async def run(self, task, sandbox, _policy):  # a leading _ (unused) is the same parameter
        return tackroom.Trajectory(final_answer=task.instruction)


def test_every_change_names_a_method_of_the_contract_and_the_version_counts_them():
    methods = {f"{m.owner}.{m.name}" for kind in METHODS.values() for m in kind}
    assert all(c.method in methods and 1 < c.contract <= CONTRACT_VERSION for c in CHANGES)
    assert CONTRACT_VERSION == max(c.contract for c in CHANGES)


def test_a_contract_1_signature_is_found_and_the_change_named():
    problem = signature_problem(OldHarness, "harness")
    assert "OldHarness.run(instruction, sandbox, policy)" in problem
    assert "Harness.run(task, sandbox, policy)" in problem and "task.instruction" in problem
    assert signature_problem(NewHarness, "harness") is None


def test_a_sync_method_core_awaits_is_a_problem():
    class Sync(tackroom.Verifier):
        """x"""

        name = "sync"

        def verify(self, task, sandbox, trajectory):  # core awaits it
            return tackroom.Reward(score=1)

    assert "must be an async def" in signature_problem(Sync, "verifier")


@pytest.mark.parametrize(("declared", "expected"), [
    (None, "declares no contract, so it was written for plugin contract 1; since then contract 2 changed Harness.run"),
    (1, "written for plugin contract 1"),
    (CONTRACT_VERSION + 1, "newer than this tackroom's"),
    ("2", "is not a contract version"),
])
def test_declared_contracts_that_cannot_run_say_why(declared, expected):
    assert expected in declared_contract_problem("harness", declared)
    assert declared_contract_problem("harness", CONTRACT_VERSION) is None


def test_an_old_contract_matters_only_for_the_kinds_that_changed():
    assert declared_contract_problem("verifier", None) is None
    assert declared_contract_problem("verifier", 1) is None
    assert declared_contract_problem("harness", 2) is None  # contract 3 changed sandboxes only
    sandbox = declared_contract_problem("sandbox", 2)
    assert sandbox is not None and "contract 3 changed Sandbox.run_grader" in sandbox and "graded" in sandbox


def test_a_harness_declaring_contract_1_is_listed_unusable_and_refused_on_get(manager):
    manager.register(plugin_module("p", tackroom_harnesses=lambda register: register.add_harness(NewHarness)),
                     distribution="tackroom-new", version="0.3", contract=1)
    entry = manager.entry("harness", "new")
    assert entry.as_dict()["contract"] == 1 and entry.as_dict()["usable"] is False
    with pytest.raises(PluginIncompatibleError,
                       match=r"harness 'new' from tackroom-new 0.3 cannot run .*Harness.run"):
        manager.get("harness", "new")
    with pytest.raises(PluginIncompatibleError):
        tackroom_app.instantiate("harness", "new", manager=manager)


def test_a_module_attribute_declares_the_contract(manager):
    manager.register(plugin_module("p", contract=2, tackroom_harnesses=lambda register: register.add_harness(NewHarness)),
                     contract=1)
    assert manager.get("harness", "new") is NewHarness


def test_a_class_registered_eagerly_is_checked_at_registration(manager):
    manager.register(plugin_module("p", tackroom_harnesses=lambda register: register.add_harness(OldHarness)))
    row = manager.entry("harness", "old").as_dict()
    assert (row["contract"], row["usable"]) == (CONTRACT_VERSION, False)
    assert "OldHarness.run(instruction, sandbox, policy)" in row["problem"]


def test_a_lazy_reference_is_checked_when_it_is_first_loaded(manager, tmp_path, monkeypatch):
    (tmp_path / "lazy_old_harness.py").write_text(
        "import tackroom\n"
        "class Lazy(tackroom.Harness):\n"
        "    '''x'''\n"
        "    name = 'lazy'\n"
        "    async def run(self, instruction, sandbox, policy):\n"
        "        return tackroom.Trajectory()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    manager.register(plugin_module("p", tackroom_harnesses=lambda register: register.add_harness(
        "lazy_old_harness:Lazy", name="lazy")))
    assert manager.entry("harness", "lazy").usable, "not imported yet: nothing known against it"
    with pytest.raises(PluginIncompatibleError, match=r"Lazy.run\(instruction, sandbox, policy\)"):
        manager.get("harness", "lazy")
    assert not manager.entry("harness", "lazy").usable
    with pytest.raises(PluginIncompatibleError):  # and stays refused
        manager.get("harness", "lazy")


def test_an_executor_with_another_run_signature_is_refused(manager):
    class Odd(tackroom.executors.Executor):
        """x"""

        name = "odd"

        async def run(self, attempt, *, manager, on_started):
            raise AssertionError("never called")

    manager.register(plugin_module("p", tackroom_executors=lambda register: register.add_executor(Odd)))
    entry = manager.registrar.executors["odd"]
    assert entry.as_dict()["usable"] is False and "Odd.run(attempt, manager, on_started)" in entry.problem
    with pytest.raises(PluginIncompatibleError, match="executor 'odd'"):
        entry.load()


def entry_point_plugin(monkeypatch, module: types.ModuleType) -> PluginManager:
    monkeypatch.setitem(sys.modules, module.__name__, module)
    pm = PluginManager(load_entry_points=False)
    pm._load_entry_point(EntryPoint(name=module.__name__, value=module.__name__, group="tackroom"))
    return pm


def test_an_installed_plugin_that_declares_nothing_is_contract_1(monkeypatch):
    pm = entry_point_plugin(monkeypatch, plugin_module(
        "tackroom_undeclared_plugin", tackroom_harnesses=lambda register: register.add_harness(NewHarness)))
    assert "declares no contract" in pm.entry("harness", "new").problem


def test_a_definition_error_in_an_installed_plugins_registrar_is_reported_not_fatal(monkeypatch):
    def register_badly(register):
        register.add_harness(NewHarness)
        register.add_harness("no.colon.here", name="x")  # PluginDefinitionError

    pm = entry_point_plugin(monkeypatch, plugin_module("tackroom_bad_registrar", contract=2,
                                                       tackroom_harnesses=register_badly))
    assert pm.entries("harness") == [], "nothing it registered in the failing hook is kept"
    assert len(pm.broken) == 1 and "tackroom_harnesses" in pm.broken[0] and "no.colon.here" in pm.broken[0]
    with pytest.raises(PluginNotFoundError, match="failed to import|tackroom_bad_registrar"):
        pm.get("harness", "new")
