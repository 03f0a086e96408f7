"""The ``archipelago`` harness declared once: name, class reference, summary and capabilities (the class takes it)."""

import tackroom

ARCHIPELAGO = tackroom.PluginSpec(
    kind="harness",
    name="archipelago",
    reference="tackroom_archipelago.harness:ArchipelagoHarness",
    summary="MCP tool-calling agent over a world's servers; exact token accounting on /v1/completions "
            "(Mercor/SkyRL guide).",
    capabilities=frozenset({tackroom.Capability.TOKEN_IDS, tackroom.Capability.NEEDS_POLICY}),
)
