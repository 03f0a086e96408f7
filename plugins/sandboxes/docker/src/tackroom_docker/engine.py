"""The docker CLI, called through asyncio subprocesses: every call has a timeout and capped output.

docker-py's ``exec_run`` has no timeout, and the CLI is what a user would type
to reproduce a problem, so this plugin talks to the engine only through it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tackroom import SandboxError, SandboxTimeoutError
from tackroom_sandbox_kit import run_process

ENGINE_DOWN_MARKERS = (
    "Cannot connect to the Docker daemon",
    "error during connect",
    "permission denied while trying to connect to the Docker daemon",
    "Is the docker daemon running",
)

START_ENGINE_HINT = (
    "Start a Docker engine: `sudo systemctl start docker`, or without systemd "
    "`sudo dockerd --iptables=false --bridge=none &` (what scripts/setup does); "
    "set DOCKER_HOST if the engine listens elsewhere"
)


class DockerEngineError(SandboxError):
    """The docker CLI is missing or the engine does not answer."""


class CallResult(BaseModel):
    """One finished docker CLI call."""

    argv: list[str]
    returncode: int
    stdout: bytes
    stderr: bytes
    truncated: bool
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def err(self) -> str:
        return self.stderr.decode(errors="replace").strip()

    @property
    def out(self) -> str:
        return self.stdout.decode(errors="replace")

    def describe(self) -> str:
        """``docker <verb> ...`` plus its exit code and the tail of stderr, for error messages."""
        verb = " ".join(self.argv[1:3])
        tail = self.err[-2000:] or self.out[-2000:].strip()
        return f"`docker {verb} …` exited {self.returncode}: {tail}"


class EngineInfo(BaseModel):
    """What ``docker info`` says about the engine (asked once per process and DOCKER_HOST)."""

    server_version: str
    ncpu: int
    mem_total: int
    init_binary: str
    local: bool
    storage_driver: str = ""
    backing_fs: str = ""

    @property
    def storage_quota(self) -> bool:
        """Whether ``docker run --storage-opt size=`` limits a container's writable layer on this engine
        (overlay2 on xfs mounted with pquota, btrfs, zfs, devicemapper)."""
        if self.storage_driver == "overlay2":
            return self.backing_fs == "xfs"
        return self.storage_driver in ("btrfs", "zfs", "devicemapper", "windowsfilter")

    @property
    def init_available(self) -> bool:
        """Whether ``docker run --init`` will find its init binary (only checkable on a local engine)."""
        if not self.local:
            return True
        name = self.init_binary or "docker-init"
        if shutil.which(name):
            return True
        return any(Path(d, name).is_file() for d in ("/usr/libexec/docker", "/usr/local/libexec/docker", "/usr/lib/docker"))


_info_cache: dict[tuple[str, str], EngineInfo] = {}


class DockerCLI:
    """Runs ``docker`` sub-commands. Timeouts kill the client; callers decide what else to kill."""

    def __init__(self, binary: str = "docker") -> None:
        self.binary = binary

    async def run(
        self,
        args: Sequence[str],
        *,
        timeout: float,
        stdin: bytes | Path | None = None,
        stdout_path: Path | None = None,
        output_limit: int = 1_000_000,
        env: dict[str, str] | None = None,
    ) -> CallResult:
        """Run ``docker *args``. Raises :class:`SandboxTimeoutError` (client killed) or
        :class:`DockerEngineError` (CLI missing / engine unreachable); any other failure
        is returned for the caller to classify.

        ``stdin`` may be bytes or a file to stream in; ``stdout_path`` sends stdout to
        a file instead of memory (downloads, image archives). A cancelled call kills the client.
        """
        try:
            result = await run_host([self.binary, *args], timeout=timeout, stdin=stdin, stdout_path=stdout_path,
                                    output_limit=output_limit, env=None if env is None else {**os.environ, **env})
        except FileNotFoundError as exc:
            raise DockerEngineError(
                f"the docker CLI ({self.binary!r}) is not on PATH: install it (`apt-get install docker.io`) "
                "or set the sandbox option docker_binary"
            ) from exc
        if not result.ok and any(m in result.err for m in ENGINE_DOWN_MARKERS):
            raise DockerEngineError(f"the Docker engine is unreachable ({result.err.splitlines()[0]}). {START_ENGINE_HINT}")
        return result

    async def check(self, args: Sequence[str], *, timeout: float, **kw: Any) -> CallResult:
        """:meth:`run`, raising :class:`SandboxError` on a non-zero exit."""
        result = await self.run(args, timeout=timeout, **kw)
        if not result.ok:
            raise SandboxError(result.describe())
        return result

    async def info(self, *, timeout: float = 30.0) -> EngineInfo:
        """Engine facts (CPUs, memory, init binary), cached per CLI binary and DOCKER_HOST."""
        host = os.environ.get("DOCKER_HOST", "")
        key = (self.binary, host)
        if key not in _info_cache:
            result = await self.check(["info", "--format", "{{json .}}"], timeout=timeout)
            data = json.loads(result.stdout)
            _info_cache[key] = EngineInfo(
                server_version=str(data.get("ServerVersion", "")),
                ncpu=int(data.get("NCPU") or os.cpu_count() or 1),
                mem_total=int(data.get("MemTotal") or 0),
                init_binary=str(data.get("InitBinary") or "docker-init"),
                local=host == "" or host.startswith("unix://"),
                storage_driver=str(data.get("Driver") or ""),
                backing_fs=next((str(v) for k, v in data.get("DriverStatus") or [] if k == "Backing Filesystem"), ""),
            )
        return _info_cache[key]

    async def image_exists(self, ref: str, *, timeout: float = 30.0) -> dict[str, Any] | None:
        """The image's ``docker image inspect`` record, or ``None`` when it is not present locally."""
        result = await self.run(["image", "inspect", "--format", "{{json .}}", ref], timeout=timeout)
        if result.ok:
            return json.loads(result.stdout)
        if "No such image" in result.err or "no such image" in result.err.lower():
            return None
        raise SandboxError(result.describe())


async def run_host(
    argv: Sequence[str],
    *,
    timeout: float,
    stdin: bytes | Path | None = None,
    stdout_path: Path | None = None,
    output_limit: int = 1_000_000,
    env: dict[str, str] | None = None,
    pass_fds: Sequence[int] = (),
) -> CallResult:
    """Run a host program in its own process group with a hard timeout (the whole group is killed) and capped
    output (tackroom_sandbox_kit's ``run_process``); ``stdin`` may be bytes or a file, ``stdout_path`` sends
    stdout to a file. Raises :class:`SandboxTimeoutError` on timeout and ``FileNotFoundError`` when the program
    does not exist."""
    out = await run_process(argv, timeout=timeout, stdin=stdin, stdout_path=stdout_path, output_limit=output_limit,
                            env=env, pass_fds=pass_fds)
    if out.timed_out:
        raise SandboxTimeoutError(
            f"`{Path(argv[0]).name} {' '.join(argv[1:3])} …` did not finish within {timeout:g}s and was killed")
    return CallResult(argv=list(argv), returncode=out.returncode, stdout=out.stdout, stderr=out.stderr,
                      truncated=out.truncated, duration_s=out.duration_s)