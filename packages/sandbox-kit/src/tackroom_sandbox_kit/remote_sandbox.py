"""What sandbox providers backed by a remote service (Modal, Daytona, …) share: one image per world, a
stop that neither hangs nor is lost to a cancellation, and the sandbox lifecycle around both
(:class:`RemoteSandbox`)."""

from __future__ import annotations

import abc
import asyncio
import hashlib
import posixpath
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from tackroom import Sandbox, SandboxError, SandboxSpec, check_relative_inside
from tackroom_sandbox_kit.remote_calls import bounded
from tackroom_sandbox_kit.tar_transfer import TarTransfer


def remote_image_key(spec: SandboxSpec, default_image: str) -> tuple[str, str]:
    """``(kind, key)`` of the image ``spec`` runs in: ``("registry", reference)`` for a prebuilt image (or
    ``default_image`` when the task has no Dockerfile), ``("dockerfile", digest)`` for an ``environment/``
    with a Dockerfile, the digest covering every file in it, so every task of one world shares one image."""
    if spec.image:
        return "registry", spec.image
    if spec.environment_dir is not None and (spec.environment_dir / "Dockerfile").is_file():
        digest = hashlib.sha256()
        for path in sorted(p for p in spec.environment_dir.rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(spec.environment_dir)).encode() + b"\0" + path.read_bytes())
        return "dockerfile", digest.hexdigest()[:16]
    return "registry", default_image


async def stop_remote(what: str, make: Callable[[], Awaitable[Any]], timeout: float) -> Exception | None:
    """Await ``make()`` (terminating or deleting a remote sandbox) for at most ``timeout`` seconds, shielded
    from cancellation: a cancelled caller still gives the call up to ``timeout`` to land, then is cancelled.
    Returns the error when the call failed (the caller notes it; ``cleanup`` removes what is left), else
    ``None``."""
    task = asyncio.ensure_future(bounded(what, make, timeout))
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task], timeout=timeout)
        raise
    except Exception as exc:
        return exc
    return None


class RemoteSandbox(TarTransfer, Sandbox):
    """The lifecycle every sandbox held by a remote service shares (Modal, Daytona, …): one slot of the
    provider's cap from ``start`` until ``stop``; a create that a cancellation does not lose (it is shielded,
    and what it made once it lands is stopped); a stop that neither hangs nor is lost to a cancellation
    (:func:`stop_remote`); ``start`` after ``stop`` refused. Files move as tar (:class:`TarTransfer`).

    A subclass says how to reach its service:

    - :meth:`_ready` (optional): checks before a slot is taken, e.g. credentials;
    - :meth:`_prepare_create`: what the create needs (the image, the app: not shielded, so a cancellation
      stops it at once), returning the create call itself, which :meth:`start` shields;
    - :meth:`_after_create` (optional): setup once the sandbox exists (a failure there stops it);
    - :meth:`_destroy`: the call that deletes the remote sandbox;

    and sets :attr:`service` (for messages), :attr:`stop_call`, :attr:`cleanup_marker` and the timeouts in
    :meth:`__init__`. ``exec``, ``_put``, ``_get`` and ``expose`` are its own.
    """

    service: ClassVar[str] = "remote"
    """The service's name in messages: ``"{service} sandbox {name} is not running"``."""
    stop_call: ClassVar[str] = "delete"
    """What :meth:`_destroy` calls, for messages: ``"{stop_call} failed (...)"``."""

    def __init__(self, spec: SandboxSpec, *, slots: asyncio.Semaphore, cleanup_marker: str,
                 create_timeout: float, stop_timeout: float) -> None:
        super().__init__(spec)
        self.slots = slots
        self.cleanup_marker = cleanup_marker
        """How the provider's ``cleanup`` finds a leaked sandbox (``tagged tackroom.managed``), for notes."""
        self.create_timeout = create_timeout
        """How long a cancelled ``start`` still waits for a create in flight to land (then stops what it made)."""
        self.stop_timeout = stop_timeout
        self.sandbox: Any = None
        """The service's handle while the sandbox runs; ``None`` before ``start`` and after ``stop``."""
        self._holding_slot = False
        self._stopped = False
        if spec.storage_mb is not None:  # a documented gap (docs/threat-model.md, "Grading")
            self.notes.append(f"storage_mb = {spec.storage_mb} is not enforced: the {self.service} sandbox "
                              "cannot limit its disk")

    # -- what a subclass provides ------------------------------------------------------
    async def _ready(self) -> None:
        """Checks before a slot is taken (credentials, a client); raise :class:`SandboxError` saying what to set."""

    @abc.abstractmethod
    async def _prepare_create(self) -> Callable[[], Awaitable[Any]]:
        """Prepare what the create needs and return the create call (bounded and retried), which returns the
        service's handle."""

    async def _after_create(self) -> None:
        """Setup once :attr:`sandbox` is set (say a working directory); a failure here stops the sandbox."""

    @abc.abstractmethod
    def _destroy(self, handle: Any) -> Awaitable[Any]:
        """The call that deletes (or terminates) the remote sandbox ``handle``."""

    # -- the lifecycle ----------------------------------------------------------------
    async def start(self) -> None:
        await self._ready()
        if self._stopped:
            raise SandboxError(f"sandbox {self.spec.name} was stopped; create a new one")
        await self.slots.acquire()
        self._holding_slot = True
        try:
            create = asyncio.ensure_future((await self._prepare_create())())
            try:
                self.sandbox = await asyncio.shield(create)
            except asyncio.CancelledError:
                # The create may still land: wait for it (bounded) and stop what it made.
                try:
                    self.sandbox = await asyncio.wait_for(asyncio.shield(create), self.create_timeout)
                except BaseException:
                    create.cancel()
                await self.stop()
                raise
            await self._after_create()
        except BaseException:
            if self.sandbox is None:
                self._release()
            else:
                await self.stop()
            raise

    def _release(self) -> None:
        if self._holding_slot:
            self._holding_slot = False
            self.slots.release()

    async def stop(self) -> None:
        """Delete the remote sandbox (shielded from cancellation, bounded) and give the slot back; idempotent."""
        self._stopped = True
        handle, self.sandbox = self.sandbox, None
        try:
            if handle is not None:
                failed = await stop_remote(self.stop_call, lambda: self._destroy(handle), self.stop_timeout)
                if failed is not None:
                    self.notes.append(f"{self.stop_call.rpartition('.')[2]} failed ({failed}); `cleanup` removes "
                                      f"sandboxes {self.cleanup_marker}")
        finally:
            self._release()

    def _live(self) -> Any:
        """The service's handle; :class:`SandboxError` when the sandbox is not running."""
        if self.sandbox is None:
            raise SandboxError(f"{self.service} sandbox {self.spec.name} is not running (never started or stopped)")
        return self.sandbox

    def _resolve(self, path: str) -> str:
        return check_relative_inside(path if path.startswith("/") else posixpath.join(self.spec.workdir, path))
