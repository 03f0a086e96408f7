"""The registration hooks and the registrar's rules."""

import sys
import types

import pytest
from pydantic import ConfigDict

import tackroom
from tackroom.testing import check_plugin


class EchoHarness(tackroom.Harness):
    """Echoes the instruction back as the final answer."""

    name = "echo"
    capabilities = frozenset({"example"})

    class Options(tackroom.PluginOptions):
        suffix: str = "!"

    async def run(self, task, sandbox, policy):
        return tackroom.Trajectory(final_answer=task.instruction + self.options.suffix)


def plugin_module(name: str, **hooks) -> types.ModuleType:
    mod = types.ModuleType(name)
    for hook_name, fn in hooks.items():
        setattr(mod, hook_name, tackroom.hookimpl(fn))
    return mod


def test_tackroom_harnesses_registers_a_class(manager):
    manager.register(plugin_module("p", tackroom_harnesses=lambda register: register.add_harness(EchoHarness)),
                     distribution="tackroom-echo", version="1.2")
    entry = manager.entry("harness", "echo")
    assert (entry.distribution, entry.version) == ("tackroom-echo", "1.2")
    assert entry.summary == "Echoes the instruction back as the final answer."
    assert manager.get("harness", "echo") is EchoHarness
    check_plugin(EchoHarness)


def test_tackroom_sandboxes_lazy_reference_is_not_imported_until_used(manager, tmp_path, monkeypatch):
    pkg = tmp_path / "heavy_sdk_plugin.py"
    pkg.write_text(
        "import tackroom\n"
        "IMPORTED = True\n"
        "class Heavy(tackroom.SandboxProvider):\n"
        "    '''Pretends to need a heavy SDK.'''\n"
        "    name = 'heavy'\n"
        "    def create(self, spec):\n"
        "        raise NotImplementedError\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    manager.register(plugin_module("p", tackroom_sandboxes=lambda register: register.add_sandbox(
        "heavy_sdk_plugin:Heavy", name="heavy", summary="lazy one")))
    entry = manager.entry("sandbox", "heavy")
    assert entry.summary == "lazy one"
    assert not entry.loaded and "heavy_sdk_plugin" not in sys.modules
    cls = manager.get("sandbox", "heavy")
    assert cls.__name__ == "Heavy" and "heavy_sdk_plugin" in sys.modules


def test_lazy_reference_whose_class_has_another_name_is_an_error(manager, tmp_path, monkeypatch):
    (tmp_path / "misnamed_plugin.py").write_text(
        "import tackroom\n"
        "class V(tackroom.Verifier):\n"
        "    '''x'''\n"
        "    name = 'other'\n"
        "    async def verify(self, task, sandbox, trajectory):\n"
        "        return tackroom.Reward(score=0)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    manager.register(plugin_module("p", tackroom_verifiers=lambda register: register.add_verifier(
        "misnamed_plugin:V", name="mine")))
    with pytest.raises(tackroom.PluginDefinitionError, match="registered as 'mine'.*name = 'other'"):
        manager.get("verifier", "mine")


def test_lazy_reference_that_cannot_import_says_so(manager):
    manager.register(plugin_module("p", tackroom_verifiers=lambda register: register.add_verifier(
        "no_such_module_xyz:V", name="ghost")), distribution="tackroom-ghost")
    with pytest.raises(tackroom.PluginDefinitionError, match="tackroom-ghost could not be imported"):
        manager.get("verifier", "ghost")


def test_tackroom_verifiers_register_a_class_and_tackroom_losses_a_spec(manager):
    class Always(tackroom.Verifier):
        """Always passes (a test verifier)."""

        name = "always"

        async def verify(self, task, sandbox, trajectory):
            return tackroom.Reward(score=1.0)

    spec = tackroom.LossSpec(name="my_loss", fn="math:fsum", aggregation="prompt_mean", summary="test")
    manager.register(plugin_module(
        "p",
        tackroom_verifiers=lambda register: register.add_verifier(Always),
        tackroom_losses=lambda register: register.add_loss(spec),
    ))
    assert manager.get("verifier", "always") is Always
    loss = manager.get("loss", "my_loss")
    assert loss.aggregation == "prompt_mean"
    import math

    assert loss.load() is math.fsum
    assert [e.kind for e in manager.entries()] == ["loss", "verifier"]


def test_two_distributions_claiming_one_name_is_an_error_naming_both(manager):
    manager.register(plugin_module("a", tackroom_harnesses=lambda register: register.add_harness(EchoHarness)),
                     distribution="tackroom-alpha")
    manager.register(plugin_module("b", tackroom_harnesses=lambda register: register.add_harness(EchoHarness)),
                     distribution="tackroom-beta")
    with pytest.raises(tackroom.PluginConflictError, match="tackroom-alpha.*tackroom-beta"):
        manager.entries()


@pytest.mark.parametrize("bad_name", ["Echo", "2fast", "has space", "", "trailing-"])
def test_bad_names_are_rejected(manager, bad_name):
    cls = type("Bad", (EchoHarness,), {"name": bad_name, "__doc__": "bad"})
    manager.register(plugin_module("p", tackroom_harnesses=lambda register: register.add_harness(cls)))
    with pytest.raises(tackroom.PluginDefinitionError, match="invalid"):
        manager.entries()


def test_options_that_ignore_unknown_fields_are_rejected(manager):
    class Loose(tackroom.PluginOptions):
        model_config = ConfigDict(extra="ignore")

    cls = type("LooseHarness", (EchoHarness,), {"name": "loose", "Options": Loose, "__doc__": "x"})
    manager.register(plugin_module("p", tackroom_harnesses=lambda register: register.add_harness(cls)))
    with pytest.raises(tackroom.PluginDefinitionError, match="forbid unknown fields"):
        manager.entries()


def test_wrong_base_class_and_abstract_classes_are_rejected(manager):
    class NotAHarness(tackroom.Verifier):
        """x"""

        name = "nah"

        async def verify(self, task, sandbox, trajectory):
            return tackroom.Reward(score=0)

    manager.register(plugin_module("p", tackroom_harnesses=lambda register: register.add_harness(NotAHarness)))
    with pytest.raises(tackroom.PluginDefinitionError, match="not a subclass of Harness"):
        manager.entries()

    class Half(tackroom.Harness):
        """no run()"""

        name = "half"

    other = tackroom.PluginManager(load_entry_points=False)
    other.register(plugin_module("p", tackroom_harnesses=lambda register: register.add_harness(Half)))
    with pytest.raises(tackroom.PluginDefinitionError, match="does not implement: run"):
        other.entries()


def test_lazy_reference_needs_a_name(manager):
    manager.register(plugin_module("p", tackroom_harnesses=lambda register: register.add_harness("a.b:C")))
    with pytest.raises(tackroom.PluginDefinitionError, match="needs name="):
        manager.entries()


def test_loss_spec_validates_name_and_reference():
    with pytest.raises(ValueError, match="invalid"):
        tackroom.LossSpec(name="Bad Name", fn="math:fsum")
    with pytest.raises(ValueError, match="package.module:function"):
        tackroom.LossSpec(name="ok", fn="math.fsum")
    with pytest.raises(ValueError):
        tackroom.LossSpec(name="ok", fn="math:fsum", aggregation="median")


def test_a_hook_implementation_that_matches_no_hook_is_rejected_with_a_hint(manager):
    class Typo:
        @tackroom.hookimpl
        def tackroom_harness(self, register):  # the hook is tackroom_harnesses
            raise AssertionError("never called")

    with pytest.raises(tackroom.PluginDefinitionError, match=r"tackroom_harness \(did you mean tackroom_harnesses"):
        manager.register(Typo(), name="typo")
    assert manager.pm.get_plugin("typo") is None, "a rejected plugin is not left half-registered"

    class Optional:
        @tackroom.hookimpl(optionalhook=True)
        def tackroom_someday(self):
            pass

    manager.register(Optional(), name="optional")  # declared optional: allowed, as pluggy allows it


def test_an_entry_point_plugin_with_an_unknown_hook_is_reported_as_broken(monkeypatch):
    from importlib.metadata import EntryPoint

    module = types.ModuleType("tackroom_typo_plugin")
    module.tackroom_trial_start = tackroom.hookimpl(lambda trial: None)
    monkeypatch.setitem(sys.modules, "tackroom_typo_plugin", module)
    ep = EntryPoint(name="typo", value="tackroom_typo_plugin", group="tackroom")
    pm = tackroom.PluginManager(load_entry_points=False)
    pm._load_entry_point(ep)
    assert len(pm.broken) == 1 and "tackroom_trial_start" in pm.broken[0] and "tackroom_trial_started" in pm.broken[0]
