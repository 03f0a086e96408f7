"""The ``terminus`` harness declared once: name, class reference, summary and capabilities (the class takes it)."""

import tackroom

TERMINUS = tackroom.PluginSpec(
    kind="harness",
    name="terminus",
    reference="tackroom_terminus.harness:TerminusHarness",
    summary="Terminus: the model drives a tmux terminal with keystrokes, answering in JSON each turn.",
    capabilities=frozenset({tackroom.Capability.CHAT, tackroom.Capability.NEEDS_POLICY}),
)
