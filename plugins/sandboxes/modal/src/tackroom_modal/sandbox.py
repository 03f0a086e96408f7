"""One Modal sandbox: create under the provider's cap, exec, tar transfers, tunnels, shielded terminate."""

from __future__ import annotations

import asyncio
import math
import posixpath
import time
from typing import TYPE_CHECKING, Any

from tackroom import (
    DEFAULT_EXEC_TIMEOUT,
    ExecResult,
    Sandbox,
    SandboxError,
    SandboxSpec,
    SandboxTimeoutError,
    check_relative_inside,
)
from tackroom_modal.calls import bounded, retried
from tackroom_sandbox_kit import TarTransfer, stop_remote

if TYPE_CHECKING:
    from tackroom_modal.provider import ModalProvider


def _cap(data: bytes, limit: int) -> tuple[str, bool]:
    return data[:limit].decode(errors="replace"), len(data) > limit


class ModalSandbox(TarTransfer, Sandbox):
    """A ``modal.Sandbox`` running ``sleep infinity``; commands go through ``Sandbox.exec``."""

    def __init__(self, spec: SandboxSpec, provider: ModalProvider) -> None:
        super().__init__(spec)
        self.provider = provider
        self.options = provider.options
        self.sandbox: Any = None
        self._holding_slot = False
        self._stopped = False
        if spec.storage_mb is not None:  # a documented gap (docs/threat-model.md, "Grading")
            self.notes.append(f"storage_mb = {spec.storage_mb} is not enforced: the modal sandbox cannot limit its disk")

    # -- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        import modal

        self.provider.require_credentials()
        if self._stopped:
            raise SandboxError(f"sandbox {self.spec.name} was stopped; create a new one")
        if self.spec.network.mode == "allowlist":  # never silently more or less network than the task asked for
            raise SandboxError(f"the modal sandbox enforces network modes none and public, not allowlist "
                               f"({self.spec.network.describe()}): give the task network_mode public or no-network")
        await self.provider.slots.acquire()
        self._holding_slot = True
        try:
            image = await self.provider.image(self.spec)
            app = await self.provider.app()
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
            create = asyncio.ensure_future(
                retried(
                    f"Sandbox.create for {self.spec.name}",
                    lambda: modal.Sandbox.create.aio("sleep", "infinity", **kwargs),
                    timeout=self.spec.start_timeout_sec, attempts=self.options.retries, wait=self.options.retry_wait_sec,
                )
            )
            try:
                self.sandbox = await asyncio.shield(create)
            except asyncio.CancelledError:
                # The create may still land: wait for it (bounded) and terminate what it made.
                try:
                    self.sandbox = await asyncio.wait_for(asyncio.shield(create), self.spec.start_timeout_sec)
                except BaseException:
                    create.cancel()
                await self.stop()
                raise
        except BaseException:
            if self.sandbox is None:
                self._release()
            else:
                await self.stop()
            raise

    def _release(self) -> None:
        if self._holding_slot:
            self._holding_slot = False
            self.provider.slots.release()

    async def stop(self) -> None:
        """Terminate (shielded from cancellation, bounded); idempotent."""
        self._stopped = True
        sb, self.sandbox = self.sandbox, None
        try:
            if sb is not None:
                failed = await stop_remote("Sandbox.terminate", lambda: sb.terminate.aio(), self.options.api_timeout_sec)
                if failed is not None:
                    self.notes.append(f"terminate failed ({failed}); `cleanup` removes sandboxes tagged "
                                      f"{self.options.cleanup_tag}")
        finally:
            self._release()

    def _live(self) -> Any:
        if self.sandbox is None:
            raise SandboxError(f"modal sandbox {self.spec.name} is not running (never started or stopped)")
        return self.sandbox

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
    def _resolve(self, path: str) -> str:
        return check_relative_inside(path if path.startswith("/") else posixpath.join(self.spec.workdir, path))

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
