"""tackroom-terminus: the ``terminus`` harness, a terminal agent that types into tmux and answers in JSON.

Registered through the ``tackroom`` entry-point group like any third-party plugin, by reference: every
``tackroom`` command loads every installed plugin's registration, and the harness's module imports httpx
(~0.4 s of CPU here), so a command that runs another harness never imports it; the class loads when a config
names ``terminus``. ``from tackroom_terminus import TerminusHarness`` still works (imported on first access).
"""

from __future__ import annotations

import tackroom

tackroom_contract = 2
"""The plugin contract this distribution is written for (CHANGELOG.md)."""

HARNESS_REF = "tackroom_terminus.harness:TerminusHarness"
SUMMARY = "Terminus: the model drives a tmux terminal with keystrokes, answering in JSON each turn."
CAPABILITIES = frozenset({"chat", "needs_policy"})
"""What the class declares; tests/test_lazy_registration.py holds the registration and the class together."""


@tackroom.hookimpl
def tackroom_harnesses(register: tackroom.Registrar) -> None:
    register.add_harness(HARNESS_REF, name="terminus", summary=SUMMARY, capabilities=CAPABILITIES)


_EXPORTS = tackroom.LazyExports(__name__, {
    "tackroom_terminus.harness": ["TerminusHarness", "TerminusOptions"],
})
__getattr__, __dir__, __all__ = _EXPORTS.getattr, _EXPORTS.dir, _EXPORTS.names
