"""The ``modal`` sandbox provider: credentials, the per-world image cache, the concurrency cap, cleanup."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, ClassVar

from tackroom import SandboxBuildError, SandboxError, SandboxProvider, SandboxSpec
from tackroom_modal import MODAL
from tackroom_modal.calls import bounded, retried
from tackroom_modal.options import ModalOptions
from tackroom_modal.sandbox import ModalSandbox
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
        self.slots = asyncio.Semaphore(self.options.max_concurrent)
        self._images: dict[str, Any] = {}
        self._image_locks: dict[str, asyncio.Lock] = {}
        self._app: Any = None

    def create(self, spec: SandboxSpec) -> ModalSandbox:
        return ModalSandbox(spec, self)

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

    async def cleanup(self) -> int:
        """Terminate every sandbox tagged ``tackroom.managed=1``; return how many."""
        import modal

        self.require_credentials()
        app = await self.app()
        found = []

        async def collect() -> None:
            async for sb in modal.Sandbox.list.aio(app_id=app.app_id, tags={self.options.cleanup_tag: "1"}):
                found.append(sb)

        await bounded("Sandbox.list", collect, self.options.api_timeout_sec)
        for sb in found:
            await bounded(f"terminating {sb.object_id}", lambda sb=sb: sb.terminate.aio(), self.options.api_timeout_sec)
        return len(found)
