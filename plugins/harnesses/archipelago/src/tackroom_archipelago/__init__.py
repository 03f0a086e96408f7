"""tackroom-archipelago: the ``archipelago`` harness (an MCP tool loop over a world, exact token accounting)."""

from __future__ import annotations

import tackroom
from tackroom_archipelago.harness import ArchipelagoHarness, ArchipelagoOptions
from tackroom_archipelago.world import WorldSpec, load_world

tackroom_contract = 2
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@tackroom.hookimpl
def tackroom_harnesses(register) -> None:
    register.add_harness(ArchipelagoHarness)


__all__ = ["ArchipelagoHarness", "ArchipelagoOptions", "WorldSpec", "load_world"]
