"""tackroom-archipelago: the ``archipelago`` harness (an MCP tool loop over a world, exact token accounting).

Registered lazily: every ``tackroom`` command loads every installed plugin's entry point, and the harness's
module imports the MCP SDK (~2 s of CPU here), so listing plugins or running another harness never imports
it; the class loads when a config names ``archipelago``. ``from tackroom_archipelago import
ArchipelagoHarness`` still works (imported on first access).
"""

from __future__ import annotations

from typing import Any

import tackroom

tackroom_contract = 2
"""The plugin contract this distribution is written for (CHANGELOG.md)."""

HARNESS_REF = "tackroom_archipelago.harness:ArchipelagoHarness"
SUMMARY = "MCP tool-calling agent over a world's servers; exact token accounting on /v1/completions (Mercor/SkyRL guide)."
CAPABILITIES = frozenset({"token_ids", "needs_policy"})
"""What the class declares; tests/test_lazy_registration.py holds the registration and the class together."""


@tackroom.hookimpl
def tackroom_harnesses(register) -> None:
    register.add_harness(HARNESS_REF, name="archipelago", summary=SUMMARY, capabilities=CAPABILITIES)


_EXPORTS = {
    "ArchipelagoHarness": "tackroom_archipelago.harness",
    "ArchipelagoOptions": "tackroom_archipelago.harness",
    "WorldSpec": "tackroom_archipelago.world",
    "WorldTable": "tackroom_archipelago.world",
    "load_world": "tackroom_archipelago.world",
    "task_world_dir": "tackroom_archipelago.world",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'tackroom_archipelago' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
