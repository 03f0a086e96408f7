"""One trial's container: started with `docker run`, driven with `docker exec`/`docker cp`, removed with `docker rm -f`."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shlex
import tempfile
import time
from pathlib import Path
from typing import Any

from tackroom import (
    DEFAULT_EXEC_TIMEOUT,
    ConfigError,
    ExecResult,
    GradingSabotagedError,
    NetworkPolicy,
    Sandbox,
    SandboxError,
    SandboxExhaustedError,
    SandboxPathError,
    SandboxSpec,
    SandboxTimeoutError,
)
from tackroom_docker.container import Container
from tackroom_docker.engine import CallResult, DockerCLI, EngineInfo
from tackroom_docker.grading import exec_in_namespaces, pids_exhausted, run_grader
from tackroom_docker.images import ImageResolver, ResolvedImage
from tackroom_docker.options import DockerOptions
from tackroom_docker.ownership import owner_label
from tackroom_docker.processes import KILL_ALL, KILL_MARKED
from tackroom_docker.tools import copy_from_image, restore_image_tools
from tackroom_docker.toolset import BIN, find_busybox, mount_args, toolset_dir
from tackroom_docker.transfer import pack_upload, unpack_download
from tackroom_sandbox_kit import (
    CHECK_TRANSFER_PATH,
    NamespacePorts,
    transfer_check_error,
    transfer_check_stdin,
    upload_directories,
)

MANAGED_LABEL = "tackroom.managed"
TRIAL_LABEL = "tackroom._trial"
OWNER_LABEL = "tackroom.owner"
EXEC_MARKER_ENV = "TACKROOM_EXEC_ID"

# PID 1, the sandbox's keeper: it reaps orphans (`wait` reaps any child) and takes no signal from inside the
# container: the kernel drops signals a namespace's init has no handler for, and dash's own SIGINT handler is
# set to ignore. `docker stop` still ends it at once: the container's stop signal is SIGKILL, sent from outside.
KEEPALIVE = 'trap "" INT TERM HUP QUIT; while :; do sleep 86400 & wait $!; done'


# fresh_folder(): $1 removed (a link at its place, not its target) and made again, empty; a link above it is refused.
FRESH_FOLDER = r"""
p=$1; cur=; rest=${p#/}
while [ -n "$rest" ]; do
    case $rest in */*) c=${rest%%/*}; rest=${rest#*/} ;; *) break ;; esac
    cur=$cur/$c
    if [ -L "$cur" ]; then echo "$cur is a link"; exit 3; fi
done
rm -rf "$p" 2>/dev/null; mkdir -p "$p" && [ -d "$p" ] && [ ! -L "$p" ] && [ -z "$(ls -A "$p")" ]
"""

# snapshot(): a tar of the paths that exist and do not go through a link, on stdout.
SNAPSHOT = r"""
n=$#
while [ "$n" -gt 0 ]; do
    n=$((n - 1)); p=$1
    ok=1; cur=; rest=${p#/}
    while [ -n "$rest" ]; do
        case $rest in */*) c=${rest%%/*}; rest=${rest#*/} ;; *) c=$rest; rest= ;; esac
        cur=$cur/$c
        if [ -n "$rest" ] && { [ -L "$cur" ] || [ ! -d "$cur" ]; }; then ok=; break; fi
    done
    if [ -n "$ok" ] && { [ -e "$p" ] || [ -L "$p" ]; }; then set -- "$@" "$p"; fi
    shift
done
if [ "$#" -eq 0 ]; then exec dd if=/dev/zero bs=512 count=2 2>/dev/null; fi  # an empty archive
exec tar -cf - "$@" 2>/dev/null
"""

DOWNLOAD_LIMIT_MB = 10240
"""The most a download may hold (apparent size) for a task without ``storage_mb``."""

DAEMON_ERROR = re.compile(r"^(Error response from daemon|Error: No such container|Error: container)", re.IGNORECASE)


class DockerSandbox(Sandbox):
    """A Docker container for one trial; see :class:`~tackroom_docker.provider.DockerProvider`."""

    binds_mounts = True
    """``SandboxSpec.mounts`` are read-only bind mounts of the container (``--mount type=bind,...,readonly``)."""


    def __init__(self, spec: SandboxSpec, options: DockerOptions, cli: DockerCLI) -> None:
        super().__init__(spec)
        self.options = options
        self.cli = cli
        self.container = Container(spec, options, cli, self.notes)
        """The handle this sandbox's parts share: the grader, the tool restorer (:mod:`tackroom_docker.container`)."""
        self.network = options.network_mode or ("host" if spec.network.mode == "public" else "none")
        self.ports = NamespacePorts(spec.network, notes=self.notes, hosts=options.egress_hosts, enter_user=False)
        """The phase's network (``ports.policy``): an allowlist is a proxy served in the container's namespace
        (:meth:`_serve_policy`); host ports forwarded in (:meth:`forward_host_port`)."""
        self.timings: dict[str, float] = {}
        self._shell = "bash"
        self._tmpfs_workdir = False
        self._run_attempted = False
        self.container.started = False
        self.container.stopped = False
        self._stop_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()

    @property
    def name(self) -> str:
        """The container's name."""
        return self.container.name

    @property
    def image(self) -> ResolvedImage | None:
        return self.container.image

    @image.setter
    def image(self, value: ResolvedImage | None) -> None:
        self.container.image = value

    @property
    def workdir(self) -> str:
        """The container's working directory (the Dockerfile's WORKDIR unless the spec sets one)."""
        return self.container.workdir

    @workdir.setter
    def workdir(self, value: str) -> None:
        self.container.workdir = value

    # -- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        if self.container.started:
            return
        if self.container.stopped:
            raise SandboxError(f"sandbox {self.name} was stopped; create a new one")
        t0 = time.monotonic()
        self.image = await ImageResolver(self.cli, self.options).resolve(self.spec)
        self.timings["image_s"] = time.monotonic() - t0
        if self.image.how in ("built", "cached"):
            self.notes.append(f"image {self.image.ref} ({self.image.how} from {self.spec.environment_dir})")
        if self.image.note:
            self.notes.append(self.image.note)
        argv = await self._run_argv(self.image)
        if self.container.stopped:
            raise SandboxError(f"sandbox {self.name} was stopped while it was starting")
        self._run_attempted = True
        t1 = time.monotonic()
        # The run call is shielded: a cancelled or timed-out start lets `docker run` finish, then removes what it
        # made. Killing the client at the start deadline would race the engine, which goes on creating a container
        # its client left (a leftover under load); the client gets `cli_timeout_sec` more to say what it made.
        run = asyncio.ensure_future(self.cli.run(argv, timeout=self.spec.start_timeout_sec + self.options.cli_timeout_sec))
        try:
            result = await asyncio.wait_for(asyncio.shield(run), self.spec.start_timeout_sec)
        except BaseException as exc:
            await self._remove_after_failed_start(run)
            if isinstance(exc, TimeoutError):  # the start deadline (SandboxTimeoutError is one too)
                raise SandboxTimeoutError(
                    f"container for {self.spec.name} did not start within {self.spec.start_timeout_sec:g}s "
                    "(SandboxSpec.start_timeout_sec)"
                ) from exc
            raise
        if not result.ok:
            await self._remove_after_failed_start(run)
            raise SandboxError(f"could not start a container from {self.image.ref}: {result.describe()}")
        self.timings["run_s"] = time.monotonic() - t1
        self.container.started = True
        try:
            await self._after_run()
        except BaseException:  # cancelled or failed once the container exists: a start leaves nothing behind
            await self._remove_after_failed_start(run)
            raise

    async def _after_run(self) -> None:
        pid = await self.cli.run(["inspect", "--format", "{{.State.Pid}}", self.name], timeout=self.options.cli_timeout_sec)
        if not pid.ok or not pid.out.strip().isdigit() or pid.out.strip() == "0":
            raise SandboxError(f"could not find the process of container {self.name}: {pid.describe()}")
        self.container.pid = int(pid.out.strip())
        await self._serve_policy()
        if self._tmpfs_workdir:
            # The tmpfs volume hides what the image put in the working directory: copied in from the image.
            await copy_from_image(self.container, self.image.ref, [f"R {self.workdir}"])

    async def _run_argv(self, image: ResolvedImage) -> list[str]:
        info = await self.cli.info(timeout=self.options.cli_timeout_sec)
        if not info.local or os.geteuid() != 0:
            raise ConfigError(
                "the docker sandbox runs its root helpers (kill, restore, transfer checks, grading) from the host with "
                "nsenter into the container, so it needs a local engine and tackroom running as root"
                + ("" if info.local else f" (DOCKER_HOST is {os.environ.get('DOCKER_HOST')})"))
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
            "--memory", f"{spec.memory_mb}m", "--memory-swap", f"{spec.memory_mb}m",  # equal: no swap beyond the limit
            "--stop-signal", "KILL", "--stop-timeout", str(self.options.stop_timeout_sec),
        ]  # fmt: skip
        if self.options.pids_limit is not None:
            argv += ["--pids-limit", str(self.options.pids_limit)]
        if self.options.no_new_privileges:
            argv += ["--security-opt", "no-new-privileges"]
        for cap in self.options.cap_drop:
            argv += ["--cap-drop", cap]
        for key, value in spec.labels.items():
            argv += ["--label", f"{key}={value}"]
        if self.options.init:
            argv.append("--init")
        # The Dockerfile's WORKDIR wins unless the spec names one explicitly or the image has none.
        if "workdir" in spec.model_fields_set or not image.working_dir or image.working_dir == "/":
            argv += ["-w", spec.workdir]
            self.workdir = spec.workdir
        else:
            self.workdir = image.working_dir
        for key, value in spec.env.items():
            argv += ["-e", f"{key}={value}"]
        if spec.storage_mb is not None:
            argv += self._storage_args(info, spec.storage_mb)
        argv += mount_args(await asyncio.to_thread(toolset_dir, find_busybox(self.options.toolset_busybox)))
        for dest, host in spec.mounts.items():  # read-only binds; a link in them resolves inside the container
            if any(c in f"{dest}{host}" for c in ',"\n'):
                raise SandboxPathError(f"mount {dest!r} <- {str(host)!r}: docker's --mount cannot carry a comma, quote "
                                       "or newline in a path")
            argv += ["--mount", f"type=bind,src={host},dst={dest},readonly"]
        argv += self.options.extra_run_args
        if self.options.keep_entrypoint:
            argv += [image.ref, f"{BIN}/sh", "-c", KEEPALIVE]
        else:
            argv += ["--entrypoint", f"{BIN}/sh", image.ref, "-c", KEEPALIVE]
        return argv

    def _storage_args(self, info: EngineInfo, size_mb: int) -> list[str]:
        """``storage_mb``: the writable layer's quota where the storage driver has one; else the working
        directory and /tmp are size-limited tmpfs volumes (filled from the image, removed with the container)."""
        if info.storage_quota:
            return ["--storage-opt", f"size={size_mb}m"]
        self.notes.append(
            f"storage_mb = {size_mb}: the engine's storage driver ({info.storage_driver or 'unknown'} on "
            f"{info.backing_fs or 'unknown'}) has no per-container quota, so {self.workdir} and /tmp are each a "
            f"{size_mb} MB tmpfs (counted in the memory limit too); the rest of the container's writable layer is not limited"
        )
        args: list[str] = []
        self._tmpfs_workdir = self.workdir not in ("/", "/tmp")
        for dest in dict.fromkeys(d for d in (self.workdir, "/tmp") if d != "/"):
            args += ["--mount", f"type=volume,dst={dest},volume-driver=local,volume-opt=type=tmpfs,"
                                f"volume-opt=device=tmpfs,volume-opt=o=size={size_mb}m"]
        return args

    async def stop(self) -> None:
        """Remove the container (``docker rm -f``: no grace period); idempotent and shielded from cancellation."""
        self.container.stopped = True
        await asyncio.shield(self.ports.close_forwards())
        await asyncio.shield(self.ports.close_egress())
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
        self.container.started = False
        self.timings["stop_s"] = time.monotonic() - t0

    async def _remove_after_failed_start(self, run: asyncio.Future[CallResult]) -> None:
        async def remove() -> None:
            if not run.done():
                await asyncio.wait([run])
            # a killed client (the engine hung past cli_timeout_sec): the engine may still create the container
            killed = not run.cancelled() and isinstance(run.exception(), SandboxTimeoutError)
            await self._remove(settle=killed)

        self.container.stopped = True
        task = asyncio.ensure_future(remove())
        self._stop_task = task
        try:
            await asyncio.shield(task)
        except SandboxError:
            pass  # the start failure is the error to report; `tackroom sandbox cleanup` removes leftovers

    # -- commands -------------------------------------------------------------------
    async def exec(
        self,
        cmd: str | list[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float = DEFAULT_EXEC_TIMEOUT,
        stdin: str | bytes | None = None,
    ) -> ExecResult:
        self.container.require_started()
        if self.container.grading_net != "container":
            return await self._exec_on_grading_network(cmd, cwd=cwd, env=env, timeout=timeout, stdin=stdin)
        marker = f"{EXEC_MARKER_ENV}={secrets.token_hex(8)}"
        argv = ["exec", "-e", marker]
        if stdin is not None:
            argv.append("-i")
        if cwd is not None:
            argv += ["-w", self._resolve(cwd)]
        for key, value in {**self.ports.env, **(env or {})}.items():
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
            await self.container.raise_if_gone(result)
        if cwd is None and result.returncode == 126 and _missing_workdir(result):
            # The agent removed the working directory: without this every later command (the verifier's too)
            # would fail to start, and the trial would end as an error instead of being graded.
            note = f"the working directory {self.workdir} was removed; commands without cwd ran in /"
            if note not in self.notes:
                self.notes.append(note)
            return await self.exec(cmd, cwd="/", env=env, timeout=timeout, stdin=stdin)
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

    async def _exec_on_grading_network(self, cmd: str | list[str], *, cwd: str | None, env: dict[str, str] | None,
                                       timeout: float, stdin: str | bytes | None) -> ExecResult:
        """After ``set_network`` changed the network: the command enters the container's namespaces from the host
        but the grading network's (see :func:`tackroom_docker.grading.exec_in_namespaces`)."""
        command = [self._shell, "-c", cmd] if isinstance(cmd, str) else list(cmd)
        data = stdin.encode() if isinstance(stdin, str) else stdin
        try:
            return await exec_in_namespaces(self.container, command, cwd=self._resolve(cwd) if cwd is not None else self.workdir,
                                            env=env or {}, timeout=timeout, stdin=data)
        except SandboxTimeoutError:
            raise SandboxTimeoutError(f"command exceeded its {timeout:g}s timeout and was killed: {_short(cmd)}") from None

    async def _kill_marked(self, marker: str) -> None:
        """Kill, inside the container, every process carrying the exec's marker variable."""
        try:
            await self.container.root_exec(KILL_MARKED, marker, timeout=min(self.options.cli_timeout_sec, 15.0))
        except SandboxError:
            pass  # the container is gone or wedged; stop() removes it either way

    async def kill_processes(self, *, timeout: float = 10.0, keep_listening: bool = False) -> list[str]:
        """Kill every process in the container but its keeper, and wait until they are gone.

        One ``kill -9 -1`` does it: the kernel signals every process of the container's pid namespace except
        PID 1 (the keeper, see ``KEEPALIVE``) and the caller at once, including processes in the middle of a
        fork, so background jobs, ``setsid``/double-forked daemons and tmux servers all go. The script runs from
        the host in the container's namespaces but outside its cgroup, so a fork bomb that holds the whole pids
        limit cannot stop it. It then reads ``/proc`` until nothing but PID 1, the keeper's fresh ``sleep`` and
        zombies (reaped by PID 1) is left. With ``init = true`` PID 1 is docker-init, whose oldest child is the
        keeper: everything else is stopped with ``kill -STOP -1`` first, then killed one by one.

        ``keep_listening``: everything is stopped first; each process holding a listening socket (TCP listen,
        bound UDP, a listening unix stream/seqpacket socket) stays, frozen, until :meth:`run_grader` resumes it
        for the grader's command; every other process is killed. Returns one line per kept process.
        """
        self.container.require_started()
        await self.ports.close_forwards()
        mode = "init" if self.options.init else "keeper"
        confirm_s = str(max(1, int(timeout) - 1))
        settle_cs = str(int(100 * min(self.options.settle_sec, max(0.0, timeout - 5)))) if keep_listening else "0"
        result = await self.container.root_exec(KILL_ALL, mode, confirm_s, "1" if keep_listening else "0", settle_cs,
                                       timeout=timeout)
        if result.returncode != 0:
            said = (result.out + result.err).strip()[:500]
            if await asyncio.to_thread(pids_exhausted, self.container.pid):
                raise SandboxExhaustedError(f"the agent holds every pid the container allows, so its processes could not "
                                            f"all be killed in {self.name} ({said}); graded 0")
            raise SandboxError(f"processes survived kill_processes() in {self.name}: {said}")
        kept = [line.removeprefix("kept ") for line in result.out.splitlines() if line.startswith("kept ")]
        self._note_stop(result.out.splitlines())
        self.container.kept = [int(line.split()[0]) for line in kept]
        return [f"pid {line}" for line in kept]

    def _note_stop(self, lines: list[str]) -> None:
        """What kill_processes(keep_listening=True) waited for and killed, in the notes."""
        for line in lines:
            if line.startswith("settled ") and int((said := line.split())[1]) >= 20:
                self.notes.append(f"the agent's turn ended with processes still busy; waited {int(said[1]) / 100:.1f}s "
                                  "for them to settle (a service still starting opens its socket)"
                                  + (f"; still busy after that: pids {', '.join(said[2:7])}" if said[2:] else ""))
        killed = [" ".join(line.split()[1:3]) for line in lines if line.startswith("killed ")]
        if killed:
            self.notes.append(f"killed {len(killed)} process(es) of the agent's turn that held no listening socket (only "
                              f"listening ones are kept into grading): pid {', pid '.join(killed[:8])}"
                              + (" and more" if len(killed) > 8 else ""))

    async def run_grader(self, cmd: list[str], *, private: list[str], collect: str, dest: Path,
                         cwd: str | None = None, env: dict[str, str] | None = None,
                         timeout: float = DEFAULT_EXEC_TIMEOUT, graded: list[str] | tuple[str, ...] = ()) -> ExecResult:
        """The grader's command in a private view kept services cannot steer (see :mod:`tackroom_docker.grading`)."""
        return await run_grader(self.container, cmd, private=private, collect=collect, dest=dest, cwd=cwd, env=env,
                                timeout=timeout, graded=graded, egress_env=self.ports.env)

    async def set_network(self, policy: NetworkPolicy, *, timeout: float = 60.0) -> None:
        """Grading's network: a container started offline grades online by running the grader's command in the
        host's network namespace (the container's own stays offline: kept services and other commands are not
        reachable from the network, and test.sh reaches kept services only through the host's ports); a
        container on the host network grades offline in a fresh namespace with loopback only. An allowlist is a
        fresh proxy in the offline container's namespace (connections of the agent's phase end); from a container
        on the host network, there is none to serve it in: grading runs with loopback only and the notes say so."""
        mode = policy.mode
        online = self.network == "host"
        self.ports.policy = policy
        await self.ports.close_egress()
        if (mode == "public") == online:
            self.container.grading_net = "container"
            await self._serve_policy()
        elif mode == "public":
            self.container.grading_net = "host"
            self.notes.append("grading ran on the host's network (the agent's container was offline): the grader's "
                              "commands enter the container from the host; services the agent left listening stay in "
                              "the container's own network")
        else:
            self.container.grading_net = "isolated"
            self.notes.append("grading ran with loopback only (the agent's container was on the host network)"
                              + (f", not {policy.describe()}" if mode == "allowlist" else ""))

    async def _serve_policy(self) -> None:
        """The phase's allowlist proxy in the container's namespace (tackroom_sandbox_kit.egress); none otherwise."""
        if self.ports.policy.mode == "allowlist" and self.network != "none":
            self.notes.append(f"[sandbox] network_mode = {self.network!r} overrides the task's allowlist")
        elif self.container.pid:
            await self.ports.serve(self.container.pid)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- files ----------------------------------------------------------------------
    def _resolve(self, path: str) -> str:
        """Absolute container path (:meth:`Container.resolve`)."""
        return self.container.resolve(path)

    async def _check_path(self, mode: str, path: str, timeout: float, tree: list[str] | None = None) -> None:
        """Refuse a transfer through a link (see :data:`tackroom.CHECK_TRANSFER_PATH`); an upload replaces a link
        at the path itself and, uploading a directory, at the places of the ``tree``'s directories."""
        stdin = transfer_check_stdin(tree) if mode == "dir" else None
        result = await self.container.root_exec(
            CHECK_TRANSFER_PATH, mode, path, timeout=min(timeout, self.options.cli_timeout_sec), stdin=stdin
        )
        error = transfer_check_error(result.returncode, result.out.strip() or result.err, path)
        if error is None:
            return
        culprit = getattr(error, "culprit", None)
        if culprit and await self._made_during_trial(culprit):
            # Not the image's layout: planted while the trial ran. A refused transfer of the grader must
            # not spare the agent its grade (a `task` error would drop the trial), so it is the model's.
            error.error_class = "model"
            error.args = (f"{error.args[0]}; it was made during the trial, not by the image",)
        if isinstance(error, SandboxPathError | IsADirectoryError | NotADirectoryError):
            raise error
        await self.container.raise_if_gone_or(result, f"could not check {path} before a transfer")

    async def _made_during_trial(self, path: str) -> bool:
        """Whether ``docker container diff`` lists ``path`` as added or changed since the container was created."""
        with tempfile.TemporaryDirectory(prefix="tackroom-docker-") as tmp:
            listing = Path(tmp) / "diff"
            result = await self.cli.run(["container", "diff", self.name], timeout=self.options.cli_timeout_sec,
                                        stdout_path=listing)
            lines = listing.read_text(errors="replace").splitlines() if result.ok else []
        return any(line[:1] in ("A", "C") and line[2:] == path for line in lines)

    async def upload(self, source: Path, dest: str, *, timeout: float = 120.0) -> None:
        """Copy a local file or directory to ``dest``; a link or special file at ``dest`` is replaced.

        Raises :class:`SandboxPathError` when a directory above ``dest`` is a link (transfers never follow
        what the agent may have planted).
        """
        full = self._resolve(dest)
        source = Path(source)
        if not source.exists():
            raise FileNotFoundError(f"upload source {source} does not exist")
        self.container.require_started()
        archive = await asyncio.to_thread(pack_upload, source, full)
        if source.is_dir():
            await self._check_path("dir", full, timeout, tree=await asyncio.to_thread(upload_directories, source))
        else:
            await self._check_path("file", full, timeout)
        # `docker cp` also works on a stopped container; the state, asked alongside, tells us it died.
        result, state = await asyncio.gather(
            self.cli.run(["cp", "-", f"{self.name}:/"], stdin=archive, timeout=timeout), self.container.state()
        )
        self.container.check_state(state, result)
        if not result.ok:
            await self.container.raise_if_gone_or(result, f"upload of {source} to {full} failed")

    async def download(self, source: str, dest: Path, *, timeout: float = 120.0) -> None:
        """Copy a sandbox file or directory to local ``dest``.

        Raises :class:`SandboxPathError` when ``source`` is, or goes through, a link or is a special file.
        Inside a directory, links that could lead out of ``dest`` and special files are left out; nothing
        is written through a link on the host (see :func:`tackroom_sandbox_kit.extract_tar`).
        """
        full = self._resolve(source)
        self.container.require_started()
        await self._check_download_size(full, timeout)
        with tempfile.TemporaryDirectory(prefix="tackroom-docker-") as tmp:
            archive = Path(tmp) / "download.tar"
            # No -L: a link at `source` comes as a link (and is refused), never as what it points to.
            outcomes = await asyncio.gather(
                self.cli.run(["cp", f"{self.name}:{full}", "-"], stdout_path=archive, timeout=timeout),
                self.container.state(),
                self._check_path("down", full, timeout),
                return_exceptions=True,
            )
            for outcome in outcomes:
                if isinstance(outcome, BaseException) and not isinstance(outcome, SandboxPathError):
                    raise outcome
            result, state, checked = outcomes
            assert isinstance(result, CallResult) and not isinstance(state, BaseException)
            self.container.check_state(state, result)
            if isinstance(checked, SandboxPathError):
                raise checked
            if not result.ok:
                if "Could not find the file" in result.err or "no such file" in result.err.lower():
                    raise FileNotFoundError(f"{full} does not exist in the sandbox")
                await self.container.raise_if_gone_or(result, f"download of {full} failed")
            await asyncio.to_thread(unpack_download, archive, Path(dest))

    async def _check_download_size(self, full: str, timeout: float) -> None:
        """``docker cp`` sends a sparse file's holes as zeros: a file the agent made with ``truncate -s 1T`` would
        land on the host whole. Its apparent size is measured first (the toolset's ``du -sb``, links not followed);
        more than the task's storage (``storage_mb``, else 10 GiB) is the agent's doing, the model's 0."""
        limit_mb = self.spec.storage_mb or DOWNLOAD_LIMIT_MB
        result = await self.container.root_exec('du -sb "$1" 2>/dev/null', full, timeout=min(timeout, self.options.cli_timeout_sec))
        size = result.out.split()[0] if result.out.split() else ""
        if size.isdigit() and int(size) > limit_mb * 1024 * 1024:
            raise SandboxExhaustedError(
                f"{full} holds {int(size) // 1024 // 1024} MB counting holes (sparse files expand when copied out), more "
                f"than the task's storage ({limit_mb} MB); it is not downloaded, graded 0")

    async def snapshot(self, paths: list[str], *, timeout: float = 120.0) -> bytes:
        """A tar of ``paths``, streamed out of the container (no file inside it that the agent could have planted).

        Paths that do not exist, or that go through a link, are left out; a link at a path is archived as a link.
        """
        full = [self._resolve(p) for p in paths]
        self.container.require_started()
        with tempfile.TemporaryDirectory(prefix="tackroom-docker-") as tmp:
            archive = Path(tmp) / "snapshot.tar"
            result = await self.container.root_exec(SNAPSHOT, *full, timeout=timeout, stdout_path=archive)
            if not result.ok:
                raise SandboxError(f"snapshot of {paths} failed in {self.name}: {result.describe()}")
            return archive.read_bytes()

    async def fresh_folder(self, path: str, *, timeout: float = 60.0) -> None:
        """``path`` made an empty folder by the toolset (never the agent's ``rm``, ``mkdir`` or shell)."""
        full = self._resolve(path)
        self.container.require_started()
        result = await self.container.root_exec(FRESH_FOLDER, full, timeout=min(timeout, self.options.cli_timeout_sec))
        if not result.ok:
            await self.container.raise_if_gone(result)
            raise GradingSabotagedError(f"the agent left {path} so that it cannot be recreated empty (exit "
                                        f"{result.returncode}: {(result.err or result.out).strip()[:300]}); graded 0")

    async def restore_image_tools(self, keep: list[str] | None = None) -> list[str]:
        """The image's executables and libraries back in place before grading (see :mod:`tackroom_docker.tools`)."""
        self.container.require_started()
        self.container.keep = [self._resolve(k) for k in keep or []]
        return await restore_image_tools(self.container, [self.workdir, *self.container.keep])

    async def forward_host_port(self, port: int) -> str:
        """The host network shares the port as it is; under ``--network none`` a forward opened in the
        container's network namespace (tackroom-sandbox-kit's ``NamespaceForwards``; it needs tackroom to run
        as root, as the docker engine does) reaches that one host port and nothing else."""
        self.container.require_started()
        if self.network == "host":
            return f"http://127.0.0.1:{port}"
        if self.network != "none":
            raise SandboxError(f"forwarding a host port into a container on network {self.network!r} is not "
                               'supported; use network_mode = "none" (the default) or "host"')
        result = await self.cli.run(["inspect", "--format", "{{.State.Pid}}", self.name],
                                    timeout=self.options.cli_timeout_sec)
        pid = result.out.strip()
        if not result.ok or not pid.isdigit() or pid == "0":
            raise SandboxError(f"could not find the process of container {self.name}: {result.describe()}")
        return await self.ports.forward(int(pid), port)

    async def expose(self, port: int) -> str:
        """``http://127.0.0.1:PORT`` with host networking; unreachable under ``--network none``."""
        self.container.require_started()
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


def _missing_workdir(result: CallResult) -> bool:
    text = result.err + result.out
    return "chdir to cwd" in text and "no such file or directory" in text.lower()



def _short(cmd: str | list[str]) -> str:
    text = cmd if isinstance(cmd, str) else shlex.join(cmd)
    return text if len(text) <= 120 else text[:117] + "..."
