"""What the daytona provider and its sandboxes share: the credentials check and the client, the per-world image
cache and the concurrency cap (:class:`DaytonaAccount`)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from tackroom import SandboxError, SandboxSpec
from tackroom_daytona.options import DaytonaOptions
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


class DaytonaAccount:
    """One provider's standing with Daytona: ``slots`` caps its sandboxes at ``max_concurrent``; the client is
    made once and each world's image object once, then reused by every sandbox."""

    def __init__(self, options: DaytonaOptions) -> None:
        self.options = options
        self.slots = asyncio.Semaphore(options.max_concurrent)
        self._images: dict[str, Any] = {}
        self._client: Any = None

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
