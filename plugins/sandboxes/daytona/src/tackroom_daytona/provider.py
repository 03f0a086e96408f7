"""The ``daytona`` sandbox provider: credentials, the client, the per-world image cache, the cap, cleanup."""

from __future__ import annotations

import asyncio
import os
from typing import Any, ClassVar

from tackroom import SandboxError, SandboxProvider, SandboxSpec
from tackroom_daytona import DAYTONA
from tackroom_daytona.calls import bounded
from tackroom_daytona.options import DaytonaOptions
from tackroom_daytona.sandbox import DaytonaSandbox
from tackroom_sandbox_kit import remote_image_key

CREDENTIAL_HELP = (
    "Daytona credentials not found: set DAYTONA_API_KEY (or DAYTONA_JWT_TOKEN and DAYTONA_ORGANIZATION_ID); "
    "DAYTONA_API_URL and DAYTONA_TARGET pick the server and region"
)


def have_credentials() -> bool:
    """True when Daytona's SDK will find credentials in its standard env vars."""
    return bool(os.environ.get("DAYTONA_API_KEY")) or bool(
        os.environ.get("DAYTONA_JWT_TOKEN") and os.environ.get("DAYTONA_ORGANIZATION_ID")
    )


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
        self.slots = asyncio.Semaphore(self.options.max_concurrent)
        self._images: dict[str, Any] = {}
        self._client: Any = None

    def create(self, spec: SandboxSpec) -> DaytonaSandbox:
        return DaytonaSandbox(spec, self)

    def client(self) -> Any:
        """The ``AsyncDaytona`` client, made once from the SDK's env vars."""
        if not have_credentials():
            raise SandboxError(CREDENTIAL_HELP)
        if self._client is None:
            import daytona

            self._client = daytona.AsyncDaytona()
        return self._client

    def image_key(self, spec: SandboxSpec) -> tuple[str, str]:
        """``(kind, key)``: what the image comes from and a key shared by every task of one world."""
        return remote_image_key(spec, self.options.default_image)

    def image(self, spec: SandboxSpec) -> tuple[str, Any]:
        """``(kind, daytona.Image)`` for ``spec``'s world, made once and reused."""
        import daytona

        kind, key = self.image_key(spec)
        if key not in self._images:
            if kind == "dockerfile":
                assert spec.environment_dir is not None
                self._images[key] = daytona.Image.from_dockerfile(spec.environment_dir / "Dockerfile")
            else:
                self._images[key] = daytona.Image.base(key)
        return kind, self._images[key]

    async def cleanup(self) -> int:
        """Delete every sandbox labelled ``tackroom.managed=1``; return how many."""
        import daytona

        client = self.client()
        found = []

        async def collect() -> None:
            async for sb in client.list(daytona.ListSandboxesQuery(labels={self.options.cleanup_label: "1"})):
                found.append(sb)

        await bounded("list", collect, self.options.api_timeout_sec)
        for sb in found:
            await bounded(f"deleting {sb.id}", lambda sb=sb: client.delete(sb, timeout=self.options.api_timeout_sec), self.options.api_timeout_sec + 5)
        return len(found)
