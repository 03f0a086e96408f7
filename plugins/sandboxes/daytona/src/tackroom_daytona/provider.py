"""The ``daytona`` sandbox provider: sandboxes over one :class:`~tackroom_daytona.account.DaytonaAccount`, and
cleanup."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from tackroom import SandboxProvider, SandboxSpec
from tackroom_daytona import DAYTONA
from tackroom_daytona.account import CREDENTIAL_HELP, DaytonaAccount, have_credentials
from tackroom_daytona.calls import bounded
from tackroom_daytona.options import DaytonaOptions
from tackroom_daytona.sandbox import DaytonaSandbox

__all__ = ["CREDENTIAL_HELP", "DaytonaProvider", "have_credentials"]


class DaytonaProvider(SandboxProvider, spec=DAYTONA):
    """Daytona sandboxes booted from one image per world.

    The image is the task's ``[environment].docker_image`` (``Image.base``: any
    registry Daytona can pull; private registries are configured in your Daytona
    organisation, not here), else its ``environment/Dockerfile``
    (``Image.from_dockerfile``, built by Daytona), else ``default_image``. One
    image object per world is kept and reused, so Daytona builds each world once
    and serves later sandboxes from its cached snapshot. Sandboxes get the task's
    CPU and memory (rounded up to whole cores and GiB), ``network_block_all``
    unless the task allows internet, and the label ``tackroom.managed=1``.

    Cannot: load an image from a tarball, pull with per-run registry
    credentials, or give fractional CPUs / sub-GiB memory.
    """

    Options: ClassVar[type[DaytonaOptions]] = DaytonaOptions  # type: ignore[assignment]
    options: DaytonaOptions

    def __init__(self, options: DaytonaOptions | dict | None = None) -> None:
        super().__init__(options)
        self.account = DaytonaAccount(self.options)

    @property
    def slots(self) -> asyncio.Semaphore:
        """The cap on sandboxes running at once (``max_concurrent``)."""
        return self.account.slots

    def create(self, spec: SandboxSpec) -> DaytonaSandbox:
        return DaytonaSandbox(spec, self.account)

    async def cleanup(self) -> int:
        """Delete every sandbox labelled ``tackroom.managed=1``; return how many."""
        import daytona

        client = self.account.client()
        found = []

        async def collect() -> None:
            async for sb in client.list(daytona.ListSandboxesQuery(labels={self.options.cleanup_label: "1"})):
                found.append(sb)

        await bounded("list", collect, self.options.api_timeout_sec)
        for sb in found:
            await bounded(f"deleting {sb.id}", lambda sb=sb: client.delete(sb, timeout=self.options.api_timeout_sec), self.options.api_timeout_sec + 5)
        return len(found)
