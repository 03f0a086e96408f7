"""The harness is registered by reference: loading the plugin does not import the MCP SDK, and what the
registration says (name, summary, capabilities) is what the class says."""

from __future__ import annotations

import subprocess
import sys

import tackroom_app


def test_registration_matches_the_class() -> None:
    from tackroom_archipelago.harness import ArchipelagoHarness

    entry = tackroom_app.PluginManager().entry("harness", "archipelago")
    assert entry.reference == "tackroom_archipelago.harness:ArchipelagoHarness"
    assert entry.summary == ArchipelagoHarness.summary()
    assert entry.capabilities == ArchipelagoHarness.capabilities
    assert entry.load() is ArchipelagoHarness


def test_loading_every_plugin_does_not_import_mcp() -> None:
    code = ("import sys, tackroom_app\n"
            "m = tackroom_app.PluginManager()\n"
            "assert 'archipelago' in {e.name for e in m.entries('harness')}\n"
            "print(sorted(n for n in sys.modules if n == 'mcp' or n.startswith(('mcp.', 'tackroom_archipelago.'))\n"
            "             and n != 'tackroom_archipelago.spec'))\n")  # the spec module is the declaration: no imports
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_the_package_still_exports_the_harness() -> None:
    import tackroom_archipelago
    from tackroom_archipelago import ArchipelagoHarness, load_world

    assert ArchipelagoHarness.name == "archipelago" and callable(load_world)
    assert set(tackroom_archipelago.__all__) <= set(dir(tackroom_archipelago)) | set(tackroom_archipelago._EXPORTS)
