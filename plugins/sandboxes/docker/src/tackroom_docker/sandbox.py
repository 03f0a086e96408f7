"""One trial's container: started with `docker run`, driven with `docker exec`/`docker cp`, removed with `docker rm -f`."""

from __future__ import annotations

import asyncio
import json
import posixpath
import re
import secrets
import shlex
import tempfile
import time
from pathlib import Path
from typing import Any

from tackroom import (
    ConfigError,
    ExecResult,
    Sandbox,
    SandboxError,
    SandboxPathError,
    SandboxSpec,
    SandboxTimeoutError,
)
from tackroom.sandbox import DEFAULT_EXEC_TIMEOUT, check_relative_inside

from tackroom_docker.engine import CallResult, DockerCLI
from tackroom_docker.images import ImageResolver, ResolvedImage
from tackroom_docker.options import DockerOptions
from tackroom_docker.ownership import owner_label

MANAGED_LABEL = "tackroom.managed"
TRIAL_LABEL = "tackroom.trial"
OWNER_LABEL = "tackroom.owner"
EXEC_MARKER_ENV = "TACKROOM_EXEC_ID"

# PID 1 when no init is available: exits on TERM/INT, so `docker stop` never waits out a grace period.
KEEPALIVE = 'trap "exit 0" TERM INT; while :; do sleep 86400 & wait $!; done'

# Kills every process of one exec: they all inherit its marker variable, also across setsid/daemonising.
KILL_MARKED = (
    'for pass in 1 2; do for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = "$$" ] && continue; '
    'if tr "\\000" "\\n" < "$d/environ" 2>/dev/null | grep -qx "$1"; then kill -9 "$p" 2>/dev/null; fi; done; done'
)

DAEMON_ERROR = re.compile(r"^(Error response from daemon|Error: No such container|Error: container)", re.IGNORECASE)


def container_name(spec: SandboxSpec) -> str:
    """A docker-safe, unique name derived from the trial name."""
    slug = re.sub(r"[^a-zA-Z0-9_.-]+", "-", spec.name).strip("-.")[:80] or "sandbox"
    return f"tackroom-{slug}-{secrets.token_hex(3)}"


class DockerSandbox(Sandbox):
    """A Docker container for one trial; see :class:`~tackroom_docker.provider.DockerProvider`."""

    def __init__(self, spec: SandboxSpec, options: DockerOptions, cli: DockerCLI) -> None:
        super().__init__(spec)
        self.options = options
        self.cli = cli
        self.name = container_name(spec)
        self.image: ResolvedImage | None = None
        self.network = options.network_mode or ("host" if spec.allow_internet else "none")
        self.timings: dict[str, float] = {}
        self.workdir = spec.workdir
        """The container's working directory (the Dockerfile's WORKDIR unless the spec sets one)."""
        self._shell = "bash"
        self._run_attempted = False
        self._started = False
        self._stopped = False
        self._stop_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()

    # -- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        if self._started:
            return
        if self._stopped:
            raise SandboxError(f"sandbox {self.name} was stopped; create a new one")
        t0 = time.monotonic()
        self.image = await ImageResolver(self.cli, self.options).resolve(self.spec)
        self.timings["image_s"] = time.monotonic() - t0
        if self.image.how in ("built", "cached"):
            self.notes.append(f"image {self.image.ref} ({self.image.how} from {self.spec.environment_dir})")
        argv = await self._run_argv(self.image)
        if self._stopped:
            raise SandboxError(f"sandbox {self.name} was stopped while it was starting")
        self._run_attempted = True
        t1 = time.monotonic()
        # The run call is shielded: a cancelled start lets `docker run` finish, then removes what it made.
        run = asyncio.ensure_future(self.cli.run(argv, timeout=self.spec.start_timeout_sec))
        try:
            result = await asyncio.shield(run)
        except BaseException as exc:
            settle = isinstance(exc, SandboxTimeoutError)  # the client was killed: the engine may still create it
            await self._remove_after_failed_start(run, settle=settle)
            if isinstance(exc, SandboxTimeoutError):
                raise SandboxTimeoutError(
                    f"container for {self.spec.name} did not start within {self.spec.start_timeout_sec:g}s "
                    "(SandboxSpec.start_timeout_sec)"
                ) from exc
            raise
        if not result.ok:
            await self._remove_after_failed_start(run, settle=False)
            raise SandboxError(f"could not start a container from {self.image.ref}: {result.describe()}")
        self.timings["run_s"] = time.monotonic() - t1
        self._started = True

    async def _run_argv(self, image: ResolvedImage) -> list[str]:
        info = await self.cli.info(timeout=self.options.cli_timeout_sec)
        spec = self.spec
        cpus = spec.cpus
        if cpus > info.ncpu:
            self.notes.append(f"cpus {spec.cpus:g} capped to the engine's {info.ncpu} CPUs")
            cpus = float(info.ncpu)
        argv = [
            "run", "-d", "--name", self.name,
            "--label", f"{MANAGED_LABEL}=1",
            "--label", f"{TRIAL_LABEL}={spec.name}",
            "--label", f"{OWNER_LABEL}={owner_label()}",
            "--network", self.network,
            "--cpus", f"{cpus:g}",
            "--memory", f"{spec.memory_mb}m", "--memory-swap", f"{spec.memory_mb}m",
            "--stop-timeout", str(self.options.stop_timeout_sec),
        ]  # fmt: skip
        for key, value in spec.labels.items():
            argv += ["--label", f"{key}={value}"]
        use_init = self.options.init if self.options.init is not None else info.init_available
        if use_init:
            argv.append("--init")
        elif self.options.init is None:
            self.notes.append("no docker-init on the engine: PID 1 is a signal-aware shell loop")
        # The Dockerfile's WORKDIR wins unless the spec names one explicitly or the image has none.
        if "workdir" in spec.model_fields_set or not image.working_dir or image.working_dir == "/":
            argv += ["-w", spec.workdir]
            self.workdir = spec.workdir
        else:
            self.workdir = image.working_dir
        for key, value in spec.env.items():
            argv += ["-e", f"{key}={value}"]
        argv += self.options.extra_run_args
        if self.options.keep_entrypoint:
            argv += [image.ref, "sh", "-c", KEEPALIVE]
        else:
            argv += ["--entrypoint", "sh", image.ref, "-c", KEEPALIVE]
        return argv

    async def stop(self) -> None:
        """Remove the container (``docker rm -f``: no grace period); idempotent and shielded from cancellation."""
        self._stopped = True
        if not self._run_attempted:
            return
        if self._stop_task is None or _failed(self._stop_task):
            self._stop_task = asyncio.ensure_future(self._remove())
        await asyncio.shield(self._stop_task)

    async def _remove(self, *, settle: bool = False) -> None:
        t0 = time.monotonic()
        attempts = 6 if settle else 1
        for attempt in range(attempts):
            result = await self.cli.run(["rm", "-f", "-v", self.name], timeout=self.options.cli_timeout_sec)
            if result.ok:
                break
            if "No such container" not in result.err and "no such container" not in result.err.lower():
                raise SandboxError(f"could not remove container {self.name}: {result.describe()}")
            if attempt + 1 < attempts:
                await asyncio.sleep(0.5)
        self._started = False
        self.timings["stop_s"] = time.monotonic() - t0

    async def _remove_after_failed_start(self, run: asyncio.Future[CallResult], *, settle: bool) -> None:
        async def remove() -> None:
            if not run.done():
                await asyncio.wait([run])
            await self._remove(settle=settle)

        self._stopped = True
        task = asyncio.ensure_future(remove())
        self._stop_task = task
        try:
            await asyncio.shield(task)
        except SandboxError:
            pass  # the start failure is the error to report; `tackroom sandbox cleanup` removes leftovers

    # -- commands -------------------------------------------------------------------
    def _require_started(self) -> None:
        if self._stopped:
            raise SandboxError(f"sandbox {self.name} has been stopped")
        if not self._started:
            raise SandboxError(f"sandbox {self.name} is not started; call start() first")

    async def exec(
        self,
        cmd: str | list[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float = DEFAULT_EXEC_TIMEOUT,
        stdin: str | bytes | None = None,
    ) -> ExecResult:
        self._require_started()
        marker = f"{EXEC_MARKER_ENV}={secrets.token_hex(8)}"
        argv = ["exec", "-e", marker]
        if stdin is not None:
            argv.append("-i")
        if cwd is not None:
            argv += ["-w", self._resolve(cwd)]
        for key, value in (env or {}).items():
            argv += ["-e", f"{key}={value}"]
        command = [self._shell, "-c", cmd] if isinstance(cmd, str) else list(cmd)
        data = stdin.encode() if isinstance(stdin, str) else stdin
        call = asyncio.ensure_future(
            self.cli.run([*argv, self.name, *command], timeout=timeout, stdin=data, output_limit=self.options.output_limit_bytes)
        )
        try:
            result = await asyncio.shield(call)
        except SandboxTimeoutError:
            await self._kill_marked(marker)
            raise SandboxTimeoutError(f"command exceeded its {timeout:g}s timeout and was killed: {_short(cmd)}") from None
        except asyncio.CancelledError:
            call.cancel()  # kills the client
            self._spawn(self._kill_marked(marker))
            raise
        if result.returncode != 0 and DAEMON_ERROR.match(result.err):
            await self._raise_if_gone(result)
        if isinstance(cmd, str) and self._shell == "bash" and result.returncode in (126, 127) and _missing_exe(result, "bash"):
            self._shell = "sh"  # an image without bash (alpine, busybox): fall back to POSIX sh
            self.notes.append("the image has no bash; string commands run under sh -c")
            return await self.exec(cmd, cwd=cwd, env=env, timeout=timeout, stdin=stdin)
        return ExecResult(
            exit_code=result.returncode,
            stdout=result.stdout.decode(errors="replace"),
            stderr=result.stderr.decode(errors="replace"),
            truncated=result.truncated,
            duration_s=result.duration_s,
        )

    async def _kill_marked(self, marker: str) -> None:
        """Kill, inside the container, every process carrying the exec's marker variable."""
        try:
            await self.cli.run(
                ["exec", "-u", "0", self.name, "sh", "-c", KILL_MARKED, "tackroom-kill", marker],
                timeout=min(self.options.cli_timeout_sec, 15.0),
            )
        except SandboxError:
            pass  # the container is gone or wedged; stop() removes it either way

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _state(self) -> dict[str, Any] | None:
        result = await self.cli.run(["inspect", "--format", "{{json .State}}", self.name], timeout=self.options.cli_timeout_sec)
        return json.loads(result.stdout) if result.ok else None

    async def _raise_if_gone(self, failed: CallResult | None = None) -> None:
        """Raise :class:`SandboxError` when the container is gone or stopped; return when it runs."""
        self._check_state(await self._state(), failed)

    def _check_state(self, state: dict[str, Any] | None, failed: CallResult | None = None) -> None:
        if state is None:
            detail = f" ({failed.err})" if failed is not None else ""
            raise SandboxError(f"the container {self.name} no longer exists{detail}; the trial will be retried")
        if not state.get("Running"):
            why = f"exit code {state.get('ExitCode')}"
            if state.get("OOMKilled"):
                why += f", killed for exceeding its {self.spec.memory_mb} MB memory limit"
            if state.get("Error"):
                why += f", {state['Error']}"
            raise SandboxError(f"the container {self.name} is not running ({why}); the trial will be retried")

    # -- files ----------------------------------------------------------------------
    def _resolve(self, path: str) -> str:
        """Absolute container path; relative paths are taken from the working directory; ``..`` is refused."""
        if not isinstance(path, str) or not path:
            raise SandboxPathError(f"invalid sandbox path {path!r}")
        if ".." in path.split("/"):
            raise SandboxPathError(f"path {path!r} contains '..'; use an absolute path without parent references")
        return check_relative_inside(path if path.startswith("/") else posixpath.join(self.workdir, path))

    async def upload(self, source: Path, dest: str, *, timeout: float = 120.0) -> None:
        from tackroom_docker.transfer import pack_upload

        full = self._resolve(dest)
        source = Path(source)
        if not source.exists():
            raise FileNotFoundError(f"upload source {source} does not exist")
        self._require_started()
        archive = await asyncio.to_thread(pack_upload, source, full)
        # `docker cp` also works on a stopped container; the state, asked alongside, tells us it died.
        result, state = await asyncio.gather(
            self.cli.run(["cp", "-", f"{self.name}:/"], stdin=archive, timeout=timeout), self._state()
        )
        self._check_state(state, result)
        if not result.ok:
            await self._raise_if_gone_or(result, f"upload of {source} to {full} failed")

    async def download(self, source: str, dest: Path, *, timeout: float = 120.0) -> None:
        from tackroom_docker.transfer import unpack_download

        full = self._resolve(source)
        self._require_started()
        with tempfile.TemporaryDirectory(prefix="tackroom-docker-") as tmp:
            archive = Path(tmp) / "download.tar"
            result, state = await asyncio.gather(
                self.cli.run(["cp", "-L", f"{self.name}:{full}", "-"], stdout_path=archive, timeout=timeout), self._state()
            )
            self._check_state(state, result)
            if not result.ok:
                if "Could not find the file" in result.err or "no such file" in result.err.lower():
                    raise FileNotFoundError(f"{full} does not exist in the sandbox")
                await self._raise_if_gone_or(result, f"download of {full} failed")
            await asyncio.to_thread(unpack_download, archive, Path(dest))

    async def _raise_if_gone_or(self, failed: CallResult, message: str) -> None:
        await self._raise_if_gone(failed)
        raise SandboxError(f"{message}: {failed.describe()}")

    async def expose(self, port: int) -> str:
        """``http://127.0.0.1:PORT`` with host networking; unreachable under ``--network none``."""
        self._require_started()
        if self.network == "host":
            return f"http://127.0.0.1:{port}"
        raise ConfigError(
            f"the docker sandbox runs with --network none, so port {port} inside it cannot be reached from the host; "
            'set [sandbox] network_mode = "host" (the container then shares the host network) or allow internet for the task'
        )


def _failed(task: asyncio.Task[None]) -> bool:
    return task.done() and (task.cancelled() or task.exception() is not None)


def _missing_exe(result: CallResult, exe: str) -> bool:
    # The engine reports a failed exec on stdout or stderr, depending on its version.
    text = result.err + result.out
    return f'"{exe}": executable file not found' in text or f"exec: {exe}: not found" in text


def _short(cmd: str | list[str]) -> str:
    text = cmd if isinstance(cmd, str) else shlex.join(cmd)
    return text if len(text) <= 120 else text[:117] + "..."
