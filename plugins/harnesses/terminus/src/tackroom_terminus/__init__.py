"""tackroom-terminus: the ``terminus`` harness, a terminal agent that types into tmux and answers in JSON.

Registered through the ``tackroom`` entry-point group like any third-party plugin.
"""

from __future__ import annotations

import tackroom
from tackroom_terminus.harness import TerminusHarness, TerminusOptions

__all__ = ["TerminusHarness", "TerminusOptions"]


tackroom_contract = 2
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@tackroom.hookimpl
def tackroom_harnesses(register: tackroom.Registrar) -> None:
    register.add_harness(TerminusHarness)
