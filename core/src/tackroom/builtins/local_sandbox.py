"""The ``local`` sandbox: a per-trial root under bubblewrap, the embedded default.

One long-lived ``bwrap`` process per sandbox holds the namespaces (mount, pid,
net, ipc, uts); every ``exec`` enters them with ``nsenter``, so processes a
harness starts (tmux, MCP servers) survive between calls and all die with the
sandbox. The host's ``/usr`` and ``/etc`` are bound read-only; ``/app``,
``/logs``, ``/tests``, ``/solution``, ``/tmp``, ``/root`` and a few more are
per-trial writable directories on the host, which is also how files move in
and out. No network unless the task allows it.

The task's Dockerfile is honoured as far as a shared /usr allows: WORKDIR,
COPY/ADD (of local files), ENV, ARG defaults and RUN. FROM is not: the
sandbox runs on the host's userland, and the trial result's notes say so.
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import posixpath
import shutil
import signal
import tempfile
import uuid
from pathlib import Path

from pydantic import Field

from tackroom.dockerfile import parse_copy, parse_dockerfile, parse_env
from tackroom.errors import TaskError
from tackroom.markers import hookimpl
from tackroom.plugin import PluginOptions
from tackroom.process import run_process
from tackroom.sandbox import (
    ExecResult,
    Sandbox,
    SandboxBuildError,
    SandboxError,
    SandboxPathError,
    SandboxProvider,
    SandboxSpec,
    SandboxTimeoutError,
)

WRITABLE_ROOTS = ("app", "logs", "tests", "solution", "tmp", "root", "home", "workspace", "data", "output", "srv", "opt")
READONLY_ROOTS = ("usr", "etc")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class LocalSandboxOptions(PluginOptions):
    root_dir: str | None = Field(default=None, description="Where per-trial roots live (default: $TMPDIR/tackroom-local)")
    output_limit_bytes: int = Field(default=1_000_000, ge=1024, description="Cap per stream of exec output")
    bwrap: str = Field(default="bwrap", description="The bubblewrap executable")
    keep_root: bool = Field(default=False, description="Keep the per-trial root after stop (debugging)")


def _bwrap_path(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise SandboxError(
            f"bubblewrap ({name!r}) is not installed; the local sandbox needs it. "
            "Install it with `apt-get install bubblewrap` (Debian/Ubuntu) or `dnf install bubblewrap`, "
            "or select another sandbox (e.g. --sandbox docker)"
        )
    return found


class LocalSandbox(Sandbox):
    """A bubblewrap sandbox; see the module docstring."""

    def __init__(self, spec: SandboxSpec, options: LocalSandboxOptions) -> None:
        super().__init__(spec)
        self.options = options
        base = Path(options.root_dir or Path(tempfile.gettempdir()) / "tackroom-local")
        self.root = base / f"{spec.name}-{uuid.uuid4().hex[:8]}"
        self.env: dict[str, str] = {"PATH": DEFAULT_PATH, "HOME": "/root", "LANG": "C.UTF-8", "TERM": "xterm"}
        self.env.update(spec.env)
        self.workdir = spec.workdir
        self._proc: asyncio.subprocess.Process | None = None
        self._child_pid: int | None = None
        self._stopped = False

    # -- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        if self._proc is not None:
            return
        if self._stopped:
            raise SandboxError("this sandbox was stopped; create a new one")
        bwrap = _bwrap_path(self.options.bwrap)
        for name in WRITABLE_ROOTS:
            (self.root / name).mkdir(parents=True, exist_ok=True)
        (self.root / "tmp").chmod(0o1777)
        argv = [bwrap, "--die-with-parent", "--new-session", "--unshare-all", "--clearenv"]
        if self.spec.allow_internet:
            argv.append("--share-net")
        for name in READONLY_ROOTS:
            argv += ["--ro-bind", f"/{name}", f"/{name}"]
        for link in ("bin", "lib", "lib64", "sbin"):
            target = os.readlink(f"/{link}") if os.path.islink(f"/{link}") else None
            if target:
                argv += ["--symlink", target, f"/{link}"]
            elif os.path.isdir(f"/{link}"):
                argv += ["--ro-bind", f"/{link}", f"/{link}"]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        for name in WRITABLE_ROOTS:
            argv += ["--bind", str(self.root / name), f"/{name}"]
        read_fd, write_fd = os.pipe()
        argv += ["--setenv", "PATH", DEFAULT_PATH, "--chdir", "/", "--info-fd", str(write_fd)]
        # The marker file says the mounts are in place: bwrap reports the child pid before
        # pivot_root finishes, and entering its namespaces earlier sees a half-built root.
        argv += ["bash", "-c", ': > /tmp/.tackroom-ready; trap "exit 0" TERM INT; while :; do sleep 3600 & wait $!; done']
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *argv, pass_fds=(write_fd,), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, start_new_session=True,
            )
        finally:
            os.close(write_fd)
        try:
            info = await asyncio.wait_for(_read_info(read_fd), self.spec.start_timeout_sec)
        except TimeoutError as exc:
            await self.stop()
            raise SandboxTimeoutError(f"bwrap did not start within {self.spec.start_timeout_sec}s") from exc
        if not info.strip():
            stderr = b""
            if self._proc.stderr is not None:
                stderr = await self._proc.stderr.read()
            await self.stop()
            raise SandboxError(f"bwrap failed to start: {stderr.decode(errors='replace').strip()}")
        self._child_pid = json.loads(info)["child-pid"]
        ready = self.root / "tmp" / ".tackroom-ready"
        deadline = asyncio.get_running_loop().time() + self.spec.start_timeout_sec
        while not ready.exists():
            code = self._proc.returncode
            if code is not None or asyncio.get_running_loop().time() > deadline:
                await self.stop()
                state = f"bwrap exited with {code}" if code is not None else f"not ready after {self.spec.start_timeout_sec}s"
                raise SandboxError(f"bwrap sandbox did not become ready ({state})")
            await asyncio.sleep(0.005)
        ready.unlink()
        await self.exec(f"mkdir -p {self.workdir}", timeout=30)
        await self._apply_dockerfile()

    async def _apply_dockerfile(self) -> None:
        if self.spec.image:
            self.notes.append(f"local sandbox: image {self.spec.image!r} is not used; the host's /usr is the userland")
        dockerfile = (self.spec.environment_dir / "Dockerfile") if self.spec.environment_dir else None
        if dockerfile is None or not dockerfile.is_file():
            return
        context = self.spec.environment_dir
        assert context is not None
        args: dict[str, str] = {}
        for ins in parse_dockerfile(dockerfile):
            where = f"{dockerfile}:{ins.line}"
            try:
                if ins.keyword == "FROM":
                    self.notes.append(f"local sandbox: 'FROM {ins.args}' is not honoured; the host's /usr is the userland")
                elif ins.keyword == "WORKDIR":
                    self.workdir = posixpath.join(self.workdir, ins.args.strip())
                    self._host_path(self.workdir, for_write=True).mkdir(parents=True, exist_ok=True)
                elif ins.keyword == "ENV":
                    self.env.update(parse_env(ins.args))
                elif ins.keyword == "ARG":
                    key, _, default = ins.args.partition("=")
                    if default:
                        args[key.strip()] = default.strip().strip('"')
                elif ins.keyword in ("COPY", "ADD"):
                    self._copy_from_context(context, ins.args)
                elif ins.keyword == "RUN":
                    cmd = ins.json_or_shell() or ins.args
                    result = await self.exec(cmd, env=args, timeout=self.spec.build_timeout_sec)
                    if not result.ok:
                        raise SandboxBuildError(
                            f"{where}: RUN failed with exit {result.exit_code}: {(result.stderr or result.stdout)[-2000:]}",
                            task_fault=True,
                        )
                elif ins.keyword in ("CMD", "ENTRYPOINT", "EXPOSE", "LABEL", "MAINTAINER", "HEALTHCHECK", "STOPSIGNAL"):
                    continue
                else:
                    self.notes.append(f"local sandbox: {ins.keyword} at {where} is ignored")
            except (ValueError, SandboxPathError) as exc:
                raise SandboxBuildError(f"{where}: {ins.keyword} {ins.args}: {exc}", task_fault=True) from exc

    def _copy_from_context(self, context: Path, args: str) -> None:
        sources, dest = parse_copy(args)
        dest_abs = posixpath.join(self.workdir, dest)
        many = len(sources) > 1 or any(glob.has_magic(s) for s in sources)
        for source in sources:
            matches = sorted(glob.glob(str(context / source))) if glob.has_magic(source) else [str(context / source)]
            if not matches or not all(os.path.exists(m) for m in matches):
                raise TaskError(f"COPY source {source!r} not found in {context}")
            for match in matches:
                src = Path(match)
                if not src.resolve().is_relative_to(context.resolve()):
                    raise SandboxPathError(f"COPY source {source!r} is outside the build context")
                if src.is_dir():
                    shutil.copytree(src, self._host_path(dest_abs, for_write=True), dirs_exist_ok=True, symlinks=True)
                else:
                    into_dir = dest.endswith("/") or many
                    target = posixpath.join(dest_abs, src.name) if into_dir else dest_abs
                    host = self._host_path(target, for_write=True)
                    host.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, host)

    async def stop(self) -> None:
        self._stopped = True
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                await asyncio.shield(asyncio.wait_for(proc.wait(), 10))
            except (TimeoutError, asyncio.CancelledError):
                pass
        if not self.options.keep_root and self.root.exists():
            await asyncio.to_thread(shutil.rmtree, self.root, True)

    # -- commands -------------------------------------------------------------------
    def _alive(self) -> None:
        if self._proc is None or self._child_pid is None:
            raise SandboxError("sandbox is not running (never started, or stopped)")
        if self._proc.returncode is not None:
            raise SandboxError(f"sandbox died (bwrap exited with {self._proc.returncode})")

    async def exec(self, cmd, *, cwd=None, env=None, timeout=600.0, stdin=None) -> ExecResult:
        self._alive()
        merged = dict(self.env)
        merged.update(env or {})
        argv = ["nsenter", "-t", str(self._child_pid), "-m", "-u", "-i", "-n", "-p", "-r", "-w", "env", "-i"]
        argv += [f"{k}={v}" for k, v in merged.items()]
        workdir = cwd or self.workdir
        script = cmd if isinstance(cmd, str) else " ".join(_quote(c) for c in cmd)
        argv += ["bash", "-c", f"cd {_quote(workdir)} || exit 1\n{script}"]
        data = stdin.encode() if isinstance(stdin, str) else stdin
        out = await run_process(argv, timeout=timeout, stdin=data, output_limit=self.options.output_limit_bytes)
        if out.timed_out:
            raise SandboxTimeoutError(f"command timed out after {timeout}s: {script[:200]}")
        self._alive()
        return ExecResult(
            exit_code=out.returncode,
            stdout=out.stdout.decode(errors="replace"),
            stderr=out.stderr.decode(errors="replace"),
            truncated=out.truncated,
            duration_s=out.duration_s,
        )

    # -- files ----------------------------------------------------------------------
    def _host_path(self, path: str, *, for_write: bool) -> Path:
        if not path.startswith("/"):
            path = posixpath.join(self.workdir, path)
        if ".." in path.split("/") or "\x00" in path:
            raise SandboxPathError(f"path {path!r} contains '..'; use a path without parent references")
        norm = posixpath.normpath(path)
        top = norm.strip("/").split("/", 1)[0]
        if top in WRITABLE_ROOTS:
            base = self.root / top
        elif top in READONLY_ROOTS and not for_write:
            base = Path("/") / top
        else:
            allowed = ", ".join(f"/{r}" for r in WRITABLE_ROOTS)
            raise SandboxPathError(f"{path!r} is outside the local sandbox's writable roots ({allowed})")
        host = base / norm.strip("/").split("/", 1)[1] if "/" in norm.strip("/") else base
        # Links inside the sandbox must not lead outside its root.
        real = Path(os.path.realpath(host))
        if not (real.is_relative_to(base.resolve()) or real == base.resolve()):
            raise SandboxPathError(f"{path!r} resolves outside the sandbox")
        return host

    async def upload(self, source: Path, dest: str, *, timeout: float = 120.0) -> None:
        self._alive()
        source = Path(source)
        if not source.exists():
            raise FileNotFoundError(str(source))
        host = self._host_path(dest, for_write=True)

        def copy() -> None:
            if source.is_dir():
                shutil.copytree(source, host, dirs_exist_ok=True, symlinks=True)
            else:
                host.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, host)
                shutil.copymode(source, host)

        try:
            await asyncio.wait_for(asyncio.to_thread(copy), timeout)
        except TimeoutError as exc:
            raise SandboxTimeoutError(f"upload of {source} to {dest} took longer than {timeout}s") from exc

    async def download(self, source: str, dest: Path, *, timeout: float = 120.0) -> None:
        self._alive()
        host = self._host_path(source, for_write=False)
        if not host.exists():
            raise FileNotFoundError(source)
        dest = Path(dest)

        def copy() -> None:
            if host.is_dir():
                shutil.copytree(host, dest, dirs_exist_ok=True, symlinks=True)
            else:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(host, dest)

        try:
            await asyncio.wait_for(asyncio.to_thread(copy), timeout)
        except TimeoutError as exc:
            raise SandboxTimeoutError(f"download of {source} took longer than {timeout}s") from exc

    async def expose(self, port: int) -> str:
        if not self.spec.allow_internet:
            raise SandboxError(
                "the local sandbox shares no network with the host unless the task allows it "
                "([environment] allow_internet = true); talk to servers inside it through exec (stdio) instead"
            )
        return f"http://127.0.0.1:{port}"


async def _read_info(fd: int) -> str:
    """Read bwrap's --info-fd JSON; stop at the first complete object or EOF (bwrap died)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    pipe = os.fdopen(fd, "rb", buffering=0)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    buf = b""
    try:
        while chunk := await reader.read(4096):
            buf += chunk
            try:
                json.loads(buf)
            except ValueError:
                continue
            break
    finally:
        transport.close()
    return buf.decode()


def _quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


class LocalSandboxProvider(SandboxProvider):
    """Per-trial root under bubblewrap with the host's /usr read-only; no network by default."""

    name = "local"
    Options = LocalSandboxOptions
    capabilities = frozenset({"persistent_processes"})

    def create(self, spec: SandboxSpec) -> LocalSandbox:
        return LocalSandbox(spec, self.options)


@hookimpl
def tackroom_sandboxes(register) -> None:
    register.add_sandbox(LocalSandboxProvider)
