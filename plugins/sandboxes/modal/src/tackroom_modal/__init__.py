"""tackroom-modal: the ``modal`` sandbox on Modal's async SDK.

Registered lazily: listing plugins never imports ``modal``; the SDK loads when a
sandbox is created.
"""

from __future__ import annotations

import tackroom

tackroom_contract = 2
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@tackroom.hookimpl
def tackroom_sandboxes(register: tackroom.Registrar) -> None:
    register.add_sandbox(
        "tackroom_modal.provider:ModalProvider",
        name="modal",
        summary="Modal sandboxes: per-world images from Dockerfiles or (private) registries, tunnels, retried SDK calls",
        capabilities={"dockerfile", "network", "expose"},
    )
