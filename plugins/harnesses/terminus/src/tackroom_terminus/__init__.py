"""tackroom-terminus: the ``terminus`` harness, a terminal agent that types into tmux and answers in JSON.

Registered through the ``tackroom`` entry-point group like any third-party plugin, by reference: every
``tackroom`` command loads every installed plugin's registration, and the harness's module imports httpx,
so a command that runs another harness never imports it; the class loads when a config names ``terminus``.
:data:`TERMINUS` is the one declaration of its name, summary and capabilities: the class takes it. ``from tackroom_terminus import TerminusHarness`` still works (imported on first access).
"""

from __future__ import annotations

import tackroom
from tackroom_terminus.spec import TERMINUS

tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@tackroom.hookimpl
def tackroom_harnesses(register: tackroom.Registrar) -> None:
    register.add_harness(TERMINUS)


_EXPORTS = tackroom.LazyExports(__name__, {
    "tackroom_terminus.harness": ["TerminusHarness", "TerminusOptions"],
})
__getattr__, __dir__, __all__ = _EXPORTS.getattr, _EXPORTS.dir, _EXPORTS.names
