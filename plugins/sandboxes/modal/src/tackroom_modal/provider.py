"""The ``modal`` sandbox provider: sandboxes over one :class:`~tackroom_modal.account.ModalAccount`, and cleanup."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from tackroom import SandboxProvider, SandboxSpec
from tackroom_modal import MODAL
from tackroom_modal.account import CREDENTIAL_HELP, ModalAccount, have_credentials
from tackroom_modal.calls import bounded
from tackroom_modal.options import ModalOptions
from tackroom_modal.sandbox import ModalSandbox

__all__ = ["CREDENTIAL_HELP", "ModalProvider", "have_credentials"]


class ModalProvider(SandboxProvider, spec=MODAL):
    """Modal sandboxes booted from one image per world.

    The image is the task's ``[environment].docker_image`` (pulled from a public
    registry, or a private one such as ECR through ``registry_secret``), else its
    ``environment/Dockerfile`` (built by Modal with the directory as context),
    else ``default_image``. Each distinct image is built once per provider and
    reused by every sandbox of that world. Sandboxes run ``sleep infinity`` with
    the task's CPU and memory, ``block_network`` unless the task allows internet,
    and are tagged ``tackroom.managed=1`` so :meth:`cleanup` finds leaks.

    Cannot: load an image from a tarball (Modal 1.6 has no loader for one), or
    open a tunnel for a port not listed in ``expose_ports`` (tunnels are fixed at create).
    """

    Options: ClassVar[type[ModalOptions]] = ModalOptions  # type: ignore[assignment]
    options: ModalOptions

    def __init__(self, options: ModalOptions | dict | None = None) -> None:
        super().__init__(options)
        self.account = ModalAccount(self.options)

    @property
    def slots(self) -> asyncio.Semaphore:
        """The cap on sandboxes running at once (``max_concurrent``)."""
        return self.account.slots

    def create(self, spec: SandboxSpec) -> ModalSandbox:
        return ModalSandbox(spec, self.account)

    async def cleanup(self) -> int:
        """Terminate every sandbox tagged ``tackroom.managed=1``; return how many."""
        import modal

        self.account.require_credentials()
        app = await self.account.app()
        found = []

        async def collect() -> None:
            async for sb in modal.Sandbox.list.aio(app_id=app.app_id, tags={self.options.cleanup_tag: "1"}):
                found.append(sb)

        await bounded("Sandbox.list", collect, self.options.api_timeout_sec)
        for sb in found:
            await bounded(f"terminating {sb.object_id}", lambda sb=sb: sb.terminate.aio(), self.options.api_timeout_sec)
        return len(found)
