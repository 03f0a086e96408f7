"""tackroom-local: the ``local`` sandbox, a per-trial root under bubblewrap (Linux), tackroom's default.

Registered through the ``tackroom`` entry-point group like any third-party plugin; core does not import it.
"""

from __future__ import annotations

import tackroom
from tackroom_local.sandbox import LocalSandbox, LocalSandboxOptions, LocalSandboxProvider

__all__ = ["LocalSandbox", "LocalSandboxOptions", "LocalSandboxProvider"]


tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@tackroom.hookimpl
def tackroom_sandboxes(register: tackroom.Registrar) -> None:
    register.add_sandbox(LocalSandboxProvider)
