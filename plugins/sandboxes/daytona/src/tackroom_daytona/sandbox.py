"""One Daytona sandbox: create under the provider's cap, exec through a wrapper, tar transfers, preview links."""

from __future__ import annotations

import asyncio
import math
import posixpath
import secrets
import shlex
import time
from typing import TYPE_CHECKING, Any

from tackroom import (
    DEFAULT_EXEC_TIMEOUT,
    ExecResult,
    Sandbox,
    SandboxBuildError,
    SandboxError,
    SandboxSpec,
    SandboxTimeoutError,
    check_relative_inside,
)
from tackroom_daytona.calls import bounded, retried
from tackroom_sandbox_kit import TarTransfer, stop_remote

if TYPE_CHECKING:
    from tackroom_daytona.provider import DaytonaProvider

KILLED = 137


def wrapper(base: str, cmd: str | list[str], *, cwd: str | None, env: dict[str, str], timeout: float, stdin: bool, limit: int) -> str:
    """A script running ``cmd`` in its own process group with stdout/stderr/stdin as files under ``base``.

    Daytona's exec merges the streams and has no stdin, so the command's streams
    go to files; on timeout the whole group is killed and ``base.timeout`` is made.
    Outputs over ``limit`` bytes are cut and ``TRUNCATED`` printed.
    """
    inner = cmd if isinstance(cmd, str) else shlex.join(cmd)
    env_prefix = ("env " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()) + " ") if env else ""
    src = f"{base}.in" if stdin else "/dev/null"
    cd = f"cd {shlex.quote(cwd)} || exit 1; " if cwd else ""
    return (
        f"{cd}setsid {env_prefix}bash -c {shlex.quote(inner)} <{src} >{base}.out 2>{base}.err & pid=$!; "
        f"( trap 'kill $s 2>/dev/null; exit 0' TERM; sleep {timeout:g} & s=$!; wait $s; "
        f"touch {base}.timeout; kill -KILL -- -$pid ) >/dev/null 2>&1 </dev/null & w=$!; "
        f"wait $pid; rc=$?; kill $w 2>/dev/null; "
        f"for f in {base}.out {base}.err; do [ $(stat -c %s $f) -gt {limit} ] && truncate -s {limit} $f && echo TRUNCATED; done; "
        f"exit $rc"
    )


class DaytonaSandbox(TarTransfer, Sandbox):
    """A Daytona sandbox; commands go through ``process.exec``, files through ``fs``."""

    def __init__(self, spec: SandboxSpec, provider: DaytonaProvider) -> None:
        super().__init__(spec)
        self.provider = provider
        self.options = provider.options
        self.sandbox: Any = None
        self._holding_slot = False
        self._stopped = False
        if spec.storage_mb is not None:  # a documented gap (docs/threat-model.md, "Grading")
            self.notes.append(f"storage_mb = {spec.storage_mb} is not enforced: the daytona sandbox cannot limit its disk")
        self._workdir: str | None = None

    # -- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        import daytona

        client = self.provider.client()
        if self._stopped:
            raise SandboxError(f"sandbox {self.spec.name} was stopped; create a new one")
        if self.spec.network.mode == "allowlist":  # never silently more or less network than the task asked for
            raise SandboxError(f"the daytona sandbox enforces network modes none and public, not allowlist "
                               f"({self.spec.network.describe()}): give the task network_mode public or no-network")
        await self.provider.slots.acquire()
        self._holding_slot = True
        try:
            kind, image = self.provider.image(self.spec)
            params = daytona.CreateSandboxFromImageParams(
                image=image,
                name=self.spec.name,
                env_vars=dict(self.spec.env),
                labels={**self.spec.labels, self.options.cleanup_label: "1", "tackroom._trial": self.spec.name},
                resources=daytona.Resources(cpu=math.ceil(self.spec.cpus), memory=math.ceil(self.spec.memory_mb / 1024)),
                network_block_all=not self.spec.allow_internet,
                auto_stop_interval=self.options.auto_stop_minutes,
            )
            limit = self.spec.build_timeout_sec + self.spec.start_timeout_sec
            create = asyncio.ensure_future(
                retried(
                    f"create {self.spec.name}",
                    lambda: client.create(params, timeout=limit),
                    timeout=limit + 10, attempts=self.options.retries, wait=self.options.retry_wait_sec,
                )
            )
            try:
                self.sandbox = await asyncio.shield(create)
            except asyncio.CancelledError:
                try:  # the create may still land: wait for it (bounded) and delete what it made
                    self.sandbox = await asyncio.wait_for(asyncio.shield(create), limit + 10)
                except BaseException:
                    create.cancel()
                await self.stop()
                raise
            except daytona.DaytonaError as exc:
                if kind == "dockerfile" and "build" in str(exc).lower():
                    raise SandboxBuildError(
                        f"daytona could not build {self.spec.environment_dir}/Dockerfile: {exc}; fix the Dockerfile",
                        task_fault=True,
                    ) from exc
                raise SandboxError(f"daytona could not create sandbox {self.spec.name}: {exc}") from exc
            made = await self.exec(f"mkdir -p {shlex.quote(self.spec.workdir)}", timeout=60)
            if made.ok:
                self._workdir = self.spec.workdir
            else:
                self.notes.append(f"could not create workdir {self.spec.workdir} ({made.stderr.strip()}); commands run in the image's default directory")
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
        """Delete the sandbox (shielded from cancellation, bounded); idempotent."""
        self._stopped = True
        sb, self.sandbox = self.sandbox, None
        try:
            if sb is not None:
                client = self.provider.client()
                t = self.options.api_timeout_sec
                failed = await stop_remote("delete", lambda: client.delete(sb, timeout=t), t + 5)
                if failed is not None:
                    self.notes.append(f"delete failed ({failed}); `cleanup` removes sandboxes labelled "
                                      f"{self.options.cleanup_label}")
        finally:
            self._release()

    def _live(self) -> Any:
        if self.sandbox is None:
            raise SandboxError(f"daytona sandbox {self.spec.name} is not running (never started or stopped)")
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
        sb = self._live()
        base = f"/tmp/.tackroom-exec-{secrets.token_hex(6)}"
        started = time.monotonic()
        if stdin is not None:
            await self._put(stdin.encode() if isinstance(stdin, str) else stdin, f"{base}.in", timeout)
        script = wrapper(base, cmd, cwd=cwd or self._workdir, env=env or {}, timeout=timeout, stdin=stdin is not None, limit=self.options.output_limit_bytes)
        response = await retried(
            "process.exec",
            lambda: sb.process.exec(script, timeout=math.ceil(timeout) + 10),
            timeout=timeout + 15, attempts=self.options.retries, wait=self.options.retry_wait_sec,
        )
        try:
            out = await self._get(f"{base}.out", 60)
            err = await self._get(f"{base}.err", 60)
            timed_out = response.exit_code == KILLED and (
                await sb.process.exec(f"test -e {base}.timeout", timeout=30)
            ).exit_code == 0
        finally:
            await sb.process.exec(f"rm -f {base}.*", timeout=30)
        if timed_out:
            raise SandboxTimeoutError(f"command {cmd!r} ran past {timeout:g}s and was killed")
        return ExecResult(
            exit_code=response.exit_code,
            stdout=out.decode(errors="replace"),
            stderr=err.decode(errors="replace"),
            truncated="TRUNCATED" in (response.result or ""),
            duration_s=time.monotonic() - started,
        )

    # -- files ----------------------------------------------------------------------
    def _resolve(self, path: str) -> str:
        return check_relative_inside(path if path.startswith("/") else posixpath.join(self.spec.workdir, path))

    async def _put(self, data: bytes, remote: str, timeout: float) -> None:
        sb = self._live()
        await bounded(f"upload to {remote}", lambda: sb.fs.upload_file(data, remote, timeout=math.ceil(timeout)), timeout + 5)

    async def _get(self, remote: str, timeout: float) -> bytes:
        sb = self._live()
        data = await bounded(f"download of {remote}", lambda: sb.fs.download_file(remote), timeout)
        return data or b""

    # -- ports --------------------------------------------------------------------
    async def expose(self, port: int) -> str:
        """A signed preview URL for ``port`` (the token is in the URL; it expires after ``preview_expires_sec``)."""
        sb = self._live()
        t = self.options.api_timeout_sec
        link = await bounded(
            "create_signed_preview_url",
            lambda: sb.create_signed_preview_url(port, expires_in_seconds=self.options.preview_expires_sec, request_timeout=t),
            t + 5,
        )
        return link.url
