"""tackroom-archipelago: the ``archipelago`` harness (an MCP tool loop over a world, exact token accounting).

Registered lazily: every ``tackroom`` command loads every installed plugin's entry point, and the harness's
module imports the MCP SDK, so listing plugins or running another harness never imports it; the class loads
when a config names ``archipelago``. :data:`ARCHIPELAGO` is the one declaration of its name, summary and
capabilities: the class takes it. ``from tackroom_archipelago import
ArchipelagoHarness`` still works (imported on first access).
"""

from __future__ import annotations

from typing import Any

import tackroom

tackroom_contract = 2
"""The plugin contract this distribution is written for (CHANGELOG.md)."""

ARCHIPELAGO = tackroom.PluginSpec(
    kind="harness",
    name="archipelago",
    reference="tackroom_archipelago.harness:ArchipelagoHarness",
    summary="MCP tool-calling agent over a world's servers; exact token accounting on /v1/completions "
            "(Mercor/SkyRL guide).",
    capabilities=frozenset({tackroom.Capability.TOKEN_IDS, tackroom.Capability.NEEDS_POLICY}),
)


@tackroom.hookimpl
def tackroom_harnesses(register: tackroom.Registrar) -> None:
    register.add_harness(ARCHIPELAGO)


_EXPORTS = {
    "ArchipelagoHarness": "tackroom_archipelago.harness",
    "ArchipelagoOptions": "tackroom_archipelago.harness",
    "WorldSpec": "tackroom_archipelago.world",
    "load_world": "tackroom_archipelago.world",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'tackroom_archipelago' has no attribute {name!r}")


__all__ = ["ArchipelagoHarness", "ArchipelagoOptions", "WorldSpec", "load_world"]
