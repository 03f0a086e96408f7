"""What sandbox providers backed by a remote service (Modal, Daytona, …) share: one image per world, and a
stop that neither hangs nor is lost to a cancellation."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

from tackroom import SandboxSpec
from tackroom_sandbox_kit.remote_calls import bounded


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
