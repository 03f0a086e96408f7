"""One Daytona sandbox: what Daytona needs to create and delete one, exec through a wrapper, files, preview links."""

from __future__ import annotations

import math
import secrets
import shlex
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tackroom import (
    DEFAULT_EXEC_TIMEOUT,
    ExecResult,
    SandboxBuildError,
    SandboxError,
    SandboxSpec,
    SandboxTimeoutError,
)
from tackroom_daytona.account import DaytonaAccount
from tackroom_daytona.calls import bounded, retried
from tackroom_sandbox_kit import RemoteSandbox

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


class DaytonaSandbox(RemoteSandbox):
    """A Daytona sandbox; commands go through ``process.exec``, files through ``fs``. The lifecycle (the slot,
    the shielded create, the bounded delete) is :class:`~tackroom_sandbox_kit.RemoteSandbox`'s."""

    service = "daytona"
    stop_call = "delete"

    def __init__(self, spec: SandboxSpec, account: DaytonaAccount) -> None:
        self.account = account
        self.options = account.options
        super().__init__(spec, slots=account.slots, cleanup_marker=f"labelled {account.options.cleanup_label}",
                         create_timeout=self._create_limit(spec) + 10, stop_timeout=account.options.api_timeout_sec + 5)
        self._workdir: str | None = None
        self._client: Any = None

    @staticmethod
    def _create_limit(spec: SandboxSpec) -> float:
        return spec.build_timeout_sec + spec.start_timeout_sec

    # -- lifecycle ------------------------------------------------------------------
    async def _ready(self) -> None:
        self._client = self.account.client()

    async def _prepare_create(self) -> Callable[[], Awaitable[Any]]:
        import daytona

        client = self._client
        kind, image = self.account.image(self.spec)
        params = daytona.CreateSandboxFromImageParams(
            image=image,
            name=self.spec.name,
            env_vars=dict(self.spec.env),
            labels={**self.spec.labels, self.options.cleanup_label: "1", "tackroom._trial": self.spec.name},
            resources=daytona.Resources(cpu=math.ceil(self.spec.cpus), memory=math.ceil(self.spec.memory_mb / 1024)),
            network_block_all=not self.spec.allow_internet,
            auto_stop_interval=self.options.auto_stop_minutes,
        )
        limit = self._create_limit(self.spec)

        async def create() -> Any:
            try:
                return await retried(
                    f"create {self.spec.name}",
                    lambda: client.create(params, timeout=limit),
                    timeout=limit + 10, attempts=self.options.retries, wait=self.options.retry_wait_sec,
                )
            except daytona.DaytonaError as exc:
                if kind == "dockerfile" and "build" in str(exc).lower():
                    raise SandboxBuildError(
                        f"daytona could not build {self.spec.environment_dir}/Dockerfile: {exc}; fix the Dockerfile",
                        task_fault=True,
                    ) from exc
                raise SandboxError(f"daytona could not create sandbox {self.spec.name}: {exc}") from exc

        return create

    async def _after_create(self) -> None:
        made = await self.exec(f"mkdir -p {shlex.quote(self.spec.workdir)}", timeout=60)
        if made.ok:
            self._workdir = self.spec.workdir
        else:
            self.notes.append(f"could not create workdir {self.spec.workdir} ({made.stderr.strip()}); commands run "
                              "in the image's default directory")

    def _destroy(self, handle: Any) -> Awaitable[Any]:
        return self.account.client().delete(handle, timeout=self.options.api_timeout_sec)

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
