"""One Modal sandbox: what Modal needs to create and terminate one, exec, files, tunnels."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tackroom import (
    DEFAULT_EXEC_TIMEOUT,
    ExecResult,
    SandboxError,
    SandboxSpec,
    SandboxTimeoutError,
)
from tackroom_modal.account import ModalAccount
from tackroom_modal.calls import bounded, retried
from tackroom_sandbox_kit import RemoteSandbox


def _cap(data: bytes, limit: int) -> tuple[str, bool]:
    return data[:limit].decode(errors="replace"), len(data) > limit


class ModalSandbox(RemoteSandbox):
    """A ``modal.Sandbox`` running ``sleep infinity``; commands go through ``Sandbox.exec``. The lifecycle (the
    slot, the shielded create, the bounded terminate) is :class:`~tackroom_sandbox_kit.RemoteSandbox`'s."""

    service = "modal"
    stop_call = "Sandbox.terminate"

    def __init__(self, spec: SandboxSpec, account: ModalAccount) -> None:
        self.account = account
        self.options = account.options
        super().__init__(spec, slots=account.slots, cleanup_marker=f"tagged {account.options.cleanup_tag}",
                         create_timeout=spec.start_timeout_sec, stop_timeout=account.options.api_timeout_sec)

    # -- lifecycle ------------------------------------------------------------------
    async def _ready(self) -> None:
        self.account.require_credentials()

    async def _prepare_create(self) -> Callable[[], Awaitable[Any]]:
        import modal

        image = await self.account.image(self.spec)
        app = await self.account.app()
        tags = {**self.spec.labels, self.options.cleanup_tag: "1", "tackroom._trial": self.spec.name}
        kwargs: dict[str, Any] = dict(
            app=app,
            image=image,
            tags=tags,
            env=dict(self.spec.env),
            timeout=self.options.sandbox_timeout_sec,
            workdir=self.spec.workdir,
            cpu=self.spec.cpus,
            memory=self.spec.memory_mb,
            block_network=not self.spec.allow_internet,
            encrypted_ports=list(self.options.expose_ports),
        )
        return lambda: retried(
            f"Sandbox.create for {self.spec.name}",
            lambda: modal.Sandbox.create.aio("sleep", "infinity", **kwargs),
            timeout=self.spec.start_timeout_sec, attempts=self.options.retries, wait=self.options.retry_wait_sec,
        )

    def _destroy(self, handle: Any) -> Awaitable[Any]:
        return handle.terminate.aio()

    # -- exec -------------------------------------------------------------------------
    async def exec(
        self,
        cmd: str | list[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float = DEFAULT_EXEC_TIMEOUT,
        stdin: str | bytes | None = None,
    ) -> ExecResult:
        out, err, code, elapsed = await self._run(cmd, cwd=cwd, env=env, timeout=timeout, stdin=stdin, limit=self.options.output_limit_bytes)
        stdout, t1 = _cap(out, self.options.output_limit_bytes)
        stderr, t2 = _cap(err, self.options.output_limit_bytes)
        return ExecResult(exit_code=code, stdout=stdout, stderr=stderr, truncated=t1 or t2, duration_s=elapsed)

    async def _run(
        self, cmd: str | list[str], *, cwd: str | None, env: dict[str, str] | None, timeout: float,
        stdin: str | bytes | None, limit: int | None,
    ) -> tuple[bytes, bytes, int, float]:
        import modal.exception as me

        sb = self._live()
        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        merged = {**self.spec.env, **(env or {})}
        started = time.monotonic()
        proc = await retried(
            f"exec {argv[:3]}",
            lambda: sb.exec.aio(*argv, workdir=cwd, env=merged or None, timeout=max(1, math.ceil(timeout)), text=False),
            timeout=self.options.api_timeout_sec, attempts=self.options.retries, wait=self.options.retry_wait_sec,
        )

        async def read(stream: Any) -> bytes:
            chunks, size = [], 0
            async for chunk in stream:
                data = chunk.encode() if isinstance(chunk, str) else bytes(chunk)
                if limit is None or size <= limit:
                    chunks.append(data)
                size += len(data)
            return b"".join(chunks)

        async def feed() -> None:
            if stdin is not None:
                proc.stdin.write(stdin.encode() if isinstance(stdin, str) else stdin)
            proc.stdin.write_eof()
            await proc.stdin.drain.aio()

        async def whole() -> tuple[bytes, bytes, int]:
            _, out, err = await asyncio.gather(feed(), read(proc.stdout), read(proc.stderr))
            return out, err, await proc.wait.aio()

        try:
            out, err, code = await asyncio.wait_for(whole(), timeout + 5)
        except (TimeoutError, me.ExecTimeoutError) as exc:
            raise SandboxTimeoutError(f"command {argv!r} ran past {timeout:g}s and was killed") from exc
        except (me.SandboxTerminatedError, me.NotFoundError) as exc:
            raise SandboxError(f"modal sandbox {self.spec.name} died: {exc}") from exc
        elapsed = time.monotonic() - started
        if code == -1 or (elapsed > timeout and code != 0):  # ContainerProcess.wait gives -1 when Modal killed it at the timeout
            raise SandboxTimeoutError(f"command {argv!r} ran past {timeout:g}s and was killed")
        return out, err, code, elapsed

    # -- files ----------------------------------------------------------------------
    async def _put(self, data: bytes, remote: str, timeout: float) -> None:
        sb = self._live()
        await bounded(f"writing {remote}", lambda: sb.filesystem.write_bytes.aio(data, remote), timeout)

    async def _get(self, remote: str, timeout: float) -> bytes:
        sb = self._live()
        return await bounded(f"reading {remote}", lambda: sb.filesystem.read_bytes.aio(remote), timeout)

    # -- ports --------------------------------------------------------------------
    async def expose(self, port: int) -> str:
        """The HTTPS URL of ``port``'s tunnel; the port must be in the provider's ``expose_ports``."""
        if port not in self.options.expose_ports:
            raise SandboxError(
                f"modal opens tunnels only at create: add {port} to [sandbox.options].expose_ports "
                f"(now {self.options.expose_ports})"
            )
        sb = self._live()
        tunnels = await bounded("Sandbox.tunnels", lambda: sb.tunnels.aio(), self.options.api_timeout_sec)
        return tunnels[port].url
