"""tackroom-daytona: the ``daytona`` sandbox on Daytona's async SDK.

Registered lazily: listing plugins never imports ``daytona``; the SDK loads when a
sandbox is created. :data:`DAYTONA` is the one declaration of its name, summary and capabilities: the
class takes it.
"""

from __future__ import annotations

import tackroom

tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


DAYTONA = tackroom.PluginSpec(
    kind="sandbox",
    name="daytona",
    reference="tackroom_daytona.provider:DaytonaProvider",
    summary="Daytona sandboxes: per-world images from Dockerfiles or registries, preview links, retried SDK calls",
    capabilities=frozenset({tackroom.Capability.DOCKERFILE, tackroom.Capability.NETWORK, tackroom.Capability.EXPOSE}),
)


@tackroom.hookimpl
def tackroom_sandboxes(register: tackroom.Registrar) -> None:
    register.add_sandbox(DAYTONA)
