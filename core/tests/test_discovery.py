"""Entry-point discovery, allow/block lists, and the conformance kit on the built-ins."""

import pytest

from tackroom._config import RunConfig
from tackroom._errors import PluginNotFoundError
from tackroom._manager import PluginManager
from tackroom.testing import check_registered


def test_builtins_are_found_through_the_entry_point_group():
    manager = PluginManager(env={})
    nop = manager.entry("harness", "nop")
    assert nop.distribution == "tackroom"
    check_registered("harness", "nop", distribution="tackroom")


def test_allowlist_keeps_builtins_and_blocklist_removes_them():
    only_core = PluginManager(env={"TACKROOM_LOAD_PLUGINS": ""})
    assert "nop" in [e.name for e in only_core.entries("harness")]
    blocked = PluginManager(env={"TACKROOM_BLOCK_PLUGINS": "nop"})
    assert "nop" not in [e.name for e in blocked.entries("harness")]
    assert any("blocked by TACKROOM_BLOCK_PLUGINS" in s for s in blocked.skipped)
    with pytest.raises(PluginNotFoundError, match="Skipped plugins: tackroom:nop"):
        blocked.entry("harness", "nop")


def test_the_default_sandbox_is_a_plugin_of_its_own_and_without_it_the_error_says_how_to_install_it():
    assert RunConfig().sandbox.name == "local"
    assert PluginManager(env={}).entry("sandbox", "local").distribution == "tackroom-local"
    only_core = PluginManager(env={"TACKROOM_LOAD_PLUGINS": ""})
    assert "local" not in [e.name for e in only_core.entries("sandbox")]
    with pytest.raises(PluginNotFoundError) as missing:
        only_core.get("sandbox", "local")
    assert ("'local' is provided by tackroom-local: pip install ./packages/sandbox-kit ./plugins/sandboxes/local"
            in str(missing.value))


def test_check_registered_fails_for_an_unregistered_name():
    with pytest.raises(AssertionError, match="not registered through the 'tackroom' entry-point group"):
        check_registered("harness", "definitely-not-installed")


def test_a_plugin_that_fails_to_import_is_reported_not_fatal():
    from importlib.metadata import EntryPoint

    manager = PluginManager(env={})
    manager._load_entry_point(EntryPoint("ghost", "tackroom_no_such_module_xyz", "tackroom"))
    assert any("ghost failed to import" in b and "ModuleNotFoundError" in b for b in manager.broken)
    assert "nop" in [e.name for e in manager.entries("harness")]
    with pytest.raises(PluginNotFoundError, match="Plugins that failed to import: .*ghost"):
        manager.entry("harness", "ghost")
