"""The registration hooks and the registrar's rules."""

import sys
import types

import pytest
from pydantic import ConfigDict

import tackroom
from tackroom._errors import PluginConflictError
from tackroom._manager import PluginManager
from tackroom.testing import check_plugin


class EchoHarness(tackroom.Harness):
    """Echoes the instruction back as the final answer."""

    name = "echo"

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
    with pytest.raises(PluginConflictError, match="tackroom-alpha.*tackroom-beta"):
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

    other = PluginManager(load_entry_points=False)
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
    pm = PluginManager(load_entry_points=False)
    pm._load_entry_point(ep)
    assert len(pm.broken) == 1 and "tackroom_trial_start" in pm.broken[0] and "tackroom_trial_started" in pm.broken[0]


# -- capabilities: a closed list, each of one kind ------------------------------------------------
def test_capabilities_are_typed_and_a_wrong_name_lists_those_of_its_kind(manager):
    chatty = type("Chatty", (EchoHarness,), {"name": "chatty", "capabilities": frozenset({"chat"}), "__doc__": "x"})
    manager.register(plugin_module("p", tackroom_harnesses=lambda register: register.add_harness(chatty)))
    assert manager.entry("harness", "chatty").capabilities == {tackroom.Capability.CHAT}
    assert all(type(c) is tackroom.Capability for c in manager.entry("harness", "chatty").capabilities)

    typo = type("Typo", (EchoHarness,), {"name": "typo", "capabilities": frozenset({"chatt"}), "__doc__": "x"})
    other = PluginManager(load_entry_points=False)
    other.register(plugin_module("p", tackroom_harnesses=lambda register: register.add_harness(typo)))
    with pytest.raises(tackroom.PluginDefinitionError,
                       match=r"'chatt' is not a capability; harness capabilities: needs_policy, chat, token_ids"):
        other.entries()


def test_a_capability_of_another_kind_is_refused():
    with pytest.raises(tackroom.PluginDefinitionError, match="'expose' is a sandbox capability; harness capabilities"):
        tackroom.PluginSpec(kind="harness", name="x", reference="m:X", summary="s", capabilities={"expose"})
    with pytest.raises(ValueError, match="'chat' is a harness capability; loss capabilities: old_logprobs"):
        tackroom.LossSpec(name="ok", fn="math:fsum", capabilities={"chat"})
    with pytest.raises(tackroom.PluginDefinitionError, match="a set of names, not the string"):
        tackroom.PluginSpec(kind="sandbox", name="x", reference="m:X", summary="s", capabilities="expose")


# -- a plugin registered by reference declares itself once, in a spec its class takes -------------------------
SPEC_MODULES = {
    "spec_decl_plugin": (
        "import tackroom\n"
        "from pydantic import ConfigDict, BaseModel\n"
        "SPEC = tackroom.PluginSpec(kind='sandbox', name='declared', reference='spec_impl_plugin:Declared',\n"
        "                           summary='Declared once', capabilities={'expose', 'network'})\n"
        "class SlotsOptions(BaseModel):\n"
        "    model_config = ConfigDict(extra='forbid')\n"
        "    slots: int = 1\n"
        "EXECUTOR = tackroom.PluginSpec(kind='executor', name='slotted', reference='spec_impl_plugin:Slotted',\n"
        "                               summary='Slots of its own', options=SlotsOptions)\n"),
    "spec_impl_plugin": (
        "import tackroom\n"
        "from tackroom.executors import AsyncioExecutor\n"
        "from spec_decl_plugin import EXECUTOR, SPEC\n"
        "class Declared(tackroom.SandboxProvider, spec=SPEC):\n"
        "    '''The docstring is not the summary: the spec is.'''\n"
        "    def create(self, spec):\n"
        "        raise NotImplementedError\n"
        "class Slotted(AsyncioExecutor, spec=EXECUTOR):\n"
        "    '''In-process, with slots.'''\n"),
}


@pytest.fixture
def spec_modules(tmp_path, monkeypatch):
    for name, code in SPEC_MODULES.items():
        (tmp_path / f"{name}.py").write_text(code)
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    import spec_decl_plugin

    return spec_decl_plugin


def test_a_spec_declares_a_lazy_plugin_once_and_its_class_takes_it(manager, spec_modules):
    spec, executor = spec_modules.SPEC, spec_modules.EXECUTOR
    manager.register(plugin_module("p", tackroom_sandboxes=lambda register: register.add_sandbox(spec),
                                   tackroom_executors=lambda register: register.add_executor(executor)))
    entry = manager.entry("sandbox", "declared")
    assert (entry.summary, entry.capabilities, entry.loaded) == ("Declared once", {"expose", "network"}, False)
    assert "spec_impl_plugin" not in sys.modules, "registering a spec imports nothing"
    cls = manager.get("sandbox", "declared")
    assert (cls.name, cls.capabilities, cls.summary(), cls.plugin_spec) == ("declared", spec.capabilities, "Declared once",
                                                                     spec)
    assert manager.registrar.executors["slotted"].options is spec_modules.SlotsOptions, "known before the import"
    slotted = manager.get("executor", "slotted")
    assert slotted.Options is spec_modules.SlotsOptions and slotted(slotted.Options(slots=2)).options.slots == 2


def test_a_spec_belongs_to_the_one_class_it_names(spec_modules):
    with pytest.raises(tackroom.PluginDefinitionError, match="a spec belongs to the one class it names"):
        type("Elsewhere", (tackroom.SandboxProvider,), {"create": lambda self, spec: None}, spec=spec_modules.SPEC)
    register = tackroom.Registrar()
    with pytest.raises(tackroom.PluginDefinitionError, match="the sandbox spec 'declared' is registered as a harness"):
        register.add_harness(spec_modules.SPEC)
    with pytest.raises(tackroom.PluginDefinitionError, match="a class or a spec declares its own"):
        register.add_sandbox(spec_modules.SPEC, summary="said twice")


def test_a_lazy_reference_whose_class_says_other_capabilities_is_refused_on_load(manager, spec_modules):
    manager.register(plugin_module("p", tackroom_sandboxes=lambda register: register.add_sandbox(
        "spec_impl_plugin:Declared", name="declared", capabilities={"dockerfile"})))
    with pytest.raises(tackroom.PluginDefinitionError, match=r"registered with capabilities \['dockerfile'\] but its "
                                                             r"class says \['expose', 'network'\]: declare them once"):
        manager.get("sandbox", "declared")


def test_a_spec_s_own_mistakes_are_refused_with_the_fix(manager, spec_modules, tmp_path):
    with pytest.raises(tackroom.PluginDefinitionError, match="a loss is a LossSpec"):
        tackroom.PluginSpec(kind="loss", name="x", reference="m:f", summary="s")
    (tmp_path / "spec_twice_plugin.py").write_text(
        "from tackroom.executors import AsyncioExecutor\n"
        "from spec_decl_plugin import SlotsOptions, EXECUTOR\n"
        "import dataclasses\n"
        "SPEC = dataclasses.replace(EXECUTOR, reference='spec_twice_plugin:Twice')\n"
        "class Twice(AsyncioExecutor, spec=SPEC):\n"
        "    Options = SlotsOptions\n")
    with pytest.raises(tackroom.PluginDefinitionError, match="sets Options and its spec sets options: declare them once"):
        import spec_twice_plugin  # noqa: F401
    manager.register(plugin_module("p", tackroom_executors=lambda register: register.add_executor(
        "spec_impl_plugin:Slotted", name="slotted")))  # its class's Options are SlotsOptions, not the default
    with pytest.raises(tackroom.PluginDefinitionError, match="Slotted.Options is not NoOptions, the options model"):
        manager.get("executor", "slotted")
