"""tackroom-terminus: the ``terminus`` harness, a terminal agent that types into tmux and answers in JSON.

Registered through the ``tackroom`` entry-point group like any third-party plugin, by reference: every
``tackroom`` command loads every installed plugin's registration, and the harness's module imports httpx,
so a command that runs another harness never imports it; the class loads when a config names ``terminus``.
:data:`TERMINUS` is the one declaration of its name, summary and capabilities: the class takes it. ``from tackroom_terminus import TerminusHarness`` still works (imported on first access).
"""

from __future__ import annotations

from typing import Any

import tackroom

tackroom_contract = 2
"""The plugin contract this distribution is written for (CHANGELOG.md)."""

TERMINUS = tackroom.PluginSpec(
    kind="harness",
    name="terminus",
    reference="tackroom_terminus.harness:TerminusHarness",
    summary="Terminus: the model drives a tmux terminal with keystrokes, answering in JSON each turn.",
    capabilities=frozenset({tackroom.Capability.CHAT, tackroom.Capability.NEEDS_POLICY}),
)


@tackroom.hookimpl
def tackroom_harnesses(register: tackroom.Registrar) -> None:
    register.add_harness(TERMINUS)


_EXPORTS = {"TerminusHarness": "tackroom_terminus.harness", "TerminusOptions": "tackroom_terminus.harness"}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'tackroom_terminus' has no attribute {name!r}")


__all__ = ["TerminusHarness", "TerminusOptions"]
