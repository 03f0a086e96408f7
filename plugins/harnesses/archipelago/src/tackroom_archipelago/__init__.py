"""tackroom-archipelago: the ``archipelago`` harness (an MCP tool loop over a world, exact token accounting).

Registered lazily: every ``tackroom`` command loads every installed plugin's entry point, and the harness's
module imports the MCP SDK (~2 s of CPU here), so listing plugins or running another harness never imports
it; the class loads when a config names ``archipelago``. ``from tackroom_archipelago import
ArchipelagoHarness`` still works (imported on first access).
"""

from __future__ import annotations

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


_EXPORTS = tackroom.LazyExports(__name__, {
    "tackroom_archipelago.harness": ["ArchipelagoHarness", "ArchipelagoOptions"],
    "tackroom_archipelago.world": ["WorldSpec", "WorldTable", "load_world", "task_world_dir"],
})
__getattr__, __dir__, __all__ = _EXPORTS.getattr, _EXPORTS.dir, _EXPORTS.names
