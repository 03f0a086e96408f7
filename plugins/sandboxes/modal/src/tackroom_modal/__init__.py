"""tackroom-modal: the ``modal`` sandbox on Modal's async SDK.

Registered lazily: listing plugins never imports ``modal``; the SDK loads when a
sandbox is created. :data:`MODAL` is the one declaration of its name, summary and capabilities: the
class takes it.
"""

from __future__ import annotations

import tackroom

tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


MODAL = tackroom.PluginSpec(
    kind="sandbox",
    name="modal",
    reference="tackroom_modal.provider:ModalProvider",
    summary="Modal sandboxes: per-world images from Dockerfiles or (private) registries, tunnels, retried SDK calls",
    capabilities=frozenset({tackroom.Capability.DOCKERFILE, tackroom.Capability.NETWORK, tackroom.Capability.EXPOSE}),
)


@tackroom.hookimpl
def tackroom_sandboxes(register: tackroom.Registrar) -> None:
    register.add_sandbox(MODAL)
