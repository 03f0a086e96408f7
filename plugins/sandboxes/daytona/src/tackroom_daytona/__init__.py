"""tackroom-daytona: the ``daytona`` sandbox on Daytona's async SDK.

Registered lazily: listing plugins never imports ``daytona``; the SDK loads when a
sandbox is created.
"""

from __future__ import annotations

import tackroom

tackroom_contract = 2
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@tackroom.hookimpl
def tackroom_sandboxes(register: tackroom.Registrar) -> None:
    register.add_sandbox(
        "tackroom_daytona.provider:DaytonaProvider",
        name="daytona",
        summary="Daytona sandboxes: per-world images from Dockerfiles or registries, preview links, retried SDK calls",
        capabilities={"dockerfile", "network", "expose"},
    )
