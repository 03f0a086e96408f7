"""What the modal provider and its sandboxes share: the credentials check, the Modal app, the per-world image
cache and the concurrency cap (:class:`ModalAccount`)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from tackroom import SandboxBuildError, SandboxError, SandboxSpec
from tackroom_modal.calls import bounded, retried
from tackroom_modal.options import ModalOptions
from tackroom_sandbox_kit import remote_image_key

CREDENTIAL_HELP = (
    "Modal credentials not found: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET "
    "(or run `modal token new`, which writes ~/.modal.toml; MODAL_CONFIG_PATH moves it)"
)


def have_credentials() -> bool:
    """True when Modal's SDK will find a token: its env vars or its config file."""
    if os.environ.get("MODAL_TOKEN_ID") and os.environ.get("MODAL_TOKEN_SECRET"):
        return True
    return Path(os.environ.get("MODAL_CONFIG_PATH") or Path.home() / ".modal.toml").is_file()


class ModalAccount:
    """One provider's standing with Modal: ``slots`` caps its sandboxes at ``max_concurrent``; the app is looked
    up once and each world's image built once, then reused by every sandbox."""

    def __init__(self, options: ModalOptions) -> None:
        self.options = options
        self.slots = asyncio.Semaphore(options.max_concurrent)
        self._images: dict[str, Any] = {}
        self._image_locks: dict[str, asyncio.Lock] = {}
        self._app: Any = None

    def require_credentials(self) -> None:
        """Raise a :class:`SandboxError` naming the env vars when no Modal token is configured."""
        if not have_credentials():
            raise SandboxError(CREDENTIAL_HELP)

    async def app(self) -> Any:
        """The Modal app sandboxes are created in (looked up once, created if missing)."""
        import modal

        if self._app is None:
            self._app = await retried(
                f"App.lookup({self.options.app_name!r})",
                lambda: modal.App.lookup.aio(
                    self.options.app_name, create_if_missing=True, environment_name=self.options.environment_name
                ),
                timeout=self.options.api_timeout_sec, attempts=self.options.retries, wait=self.options.retry_wait_sec,
            )
        return self._app

    def image_key(self, spec: SandboxSpec) -> tuple[str, str]:
        """``(kind, key)``: what the image comes from and a key shared by every task of one world."""
        return remote_image_key(spec, self.options.default_image)

    def image_definition(self, spec: SandboxSpec) -> Any:
        """The unbuilt ``modal.Image`` for ``spec``."""
        import modal

        kind, ref = self.image_key(spec)
        secret = (
            modal.Secret.from_name(self.options.registry_secret, environment_name=self.options.environment_name)
            if self.options.registry_secret
            else None
        )
        if kind == "dockerfile":
            assert spec.environment_dir is not None
            return modal.Image.from_dockerfile(
                spec.environment_dir / "Dockerfile", context_dir=spec.environment_dir, registry_secret=secret
            )
        if self.options.registry == "aws_ecr":
            if secret is None:
                raise SandboxError("registry = 'aws_ecr' needs registry_secret: the name of a modal.Secret with AWS keys")
            return modal.Image.from_aws_ecr(ref, secret=secret)
        if self.options.registry == "gcp_artifact_registry":
            if secret is None:
                raise SandboxError("registry = 'gcp_artifact_registry' needs registry_secret (SERVICE_ACCOUNT_JSON)")
            return modal.Image.from_gcp_artifact_registry(ref, secret=secret)
        return modal.Image.from_registry(ref, secret=secret)

    async def image(self, spec: SandboxSpec) -> Any:
        """The built image for ``spec``'s world: built once, then reused by every sandbox."""
        import modal.exception as me

        kind, key = self.image_key(spec)
        lock = self._image_locks.setdefault(key, asyncio.Lock())
        async with lock:
            if key in self._images:
                return self._images[key]
            image = self.image_definition(spec)
            app = await self.app()
            try:
                await bounded(f"building image {key}", lambda: image.build.aio(app), spec.build_timeout_sec)
            except me.ImageBuildError as exc:
                if kind == "dockerfile":
                    raise SandboxBuildError(
                        f"modal could not build {spec.environment_dir}/Dockerfile: {exc}; fix the Dockerfile", task_fault=True
                    ) from exc
                raise SandboxBuildError(f"modal could not pull image {key!r}: {exc}; check the reference and registry_secret") from exc
            self._images[key] = image
            return image
