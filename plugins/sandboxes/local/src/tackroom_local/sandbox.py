"""The ``local`` sandbox: a per-trial root under bubblewrap, tackroom's default sandbox.

One long-lived ``bwrap`` per sandbox holds the namespaces (user, mount, pid, net, ipc, uts, cgroup);
every ``exec`` enters them with ``nsenter``, so processes a harness starts (tmux, MCP servers) live
between calls and all die with the sandbox. The writable roots (``/app``, ``/logs``, ``/tests``,
``/solution``, ``/tmp``, ``/root`` and a few more, :data:`WRITABLE_ROOTS`) are per-trial directories on
the host, which is also how files move in and out. No network unless the task allows it.

The agent inside is an adversary; docs/threat-model.md (``## local``) lists what it can and cannot do.
What enforces each point:

Privileges
    Root inside is uid 0 of a user namespace of the sandbox's own. Run as root, tackroom maps it to an
    unprivileged host uid (``host_uid``; by default a fresh one per sandbox), so what the agent creates
    is owned by that uid on the host and host files owned by root are ``nobody`` inside; run
    unprivileged, it is the invoking user. Every capability is dropped: bwrap's ``--cap-drop ALL`` for
    the keeper, and each exec runs under ``setpriv --no-new-privs --bounding-set=-all --inh-caps=-all``
    after entering the user namespace, so CapEff and CapBnd are 0, set-uid binaries do not elevate, and
    ``mount``, ``umount``, ``mknod``, ``chown`` to other uids fail. ``--disable-userns`` stops
    ``unshare -U`` (no namespace where capabilities come back). ``setpriv`` is the one program that runs
    holding the namespace's capabilities: it is started by its absolute path in read-only /usr with an
    empty environment, so nothing the agent plants on a PATH or in LD_* runs before they are dropped; the
    host's environment never reaches the sandbox.
Filesystem
    ``/`` is a read-only tmpfs; ``/usr`` is the host's, read-only; ``/etc`` holds only what shells and
    common tools read (:data:`ETC_FILES`: passwd, group, hosts, resolv.conf, nsswitch.conf, ld.so.cache,
    alternatives/, ssl/certs, ...), read-only, never shadow, gshadow, sudoers, ssh keys or pip/npm
    credentials; ``/proc`` is the sandbox's own pid namespace's (bwrap keeps /proc/sys read-only);
    ``/dev`` is a minimal one (null, zero, random, tty, pts, shm); ``/sys`` is absent.
The keeper
    PID 1 of the pid namespace is an execute-only copy of bash (so it is not dumpable: ptrace,
    /proc/1/mem and /proc/1/fd are refused) that ignores signals (and PID 1 gets no signal it has no
    handler for from inside), never forks (a fork bomb cannot starve it) and, run as root, has
    ``oom_score_adj`` -1000. It waits on a socket whose other end tackroom holds, reaping orphans.
Limits
    ``SandboxSpec.memory_mb``, ``cpus`` and ``pids_limit`` (an option, default 512 processes+threads)
    go into a cgroup of the sandbox's own (cgroup v2 when its memory and pids controllers can be
    delegated, else cgroup v1's memory/pids/cpu hierarchies, nested under tackroom's own) that bwrap and
    every exec join before they start. Without a writable cgroup, ``limits = "auto"`` falls back to
    rlimits (``prlimit``: ``RLIMIT_AS`` = memory_mb per process, ``RLIMIT_NPROC`` = pids_limit for the
    sandbox's uid; cpus is then not enforced) and says so in the trial's notes; ``limits = "cgroup"``
    refuses to start with a :class:`SandboxError` that names the limits. ``SandboxSpec.storage_mb``: run as
    root, the per-trial root is an ext4 filesystem of that size (a sparse file beside it, loop-mounted),
    so writing past it fails inside with ENOSPC; unprivileged, disk use is not limited and the notes say so.
Transfers
    ``upload``/``download`` never let the kernel follow a link the agent made: they walk the sandbox's
    view one component at a time with directory file descriptors and ``O_NOFOLLOW``, resolving each
    symlink themselves *as the sandbox sees it* (an absolute target starts again at the sandbox's ``/``),
    so a path can only ever reach the writable roots, /usr and the bound /etc files, never the host's
    own files. Uploads replace whatever sits at the destination (a symlink, fifo, socket, file or
    directory) with what was uploaded, via a temporary name and ``rename``; a symlink in the
    destination's parents is followed only when it leads to a directory in the writable roots, otherwise
    it (like a file or fifo there) is replaced by a directory. Downloads read regular files and
    directories only (a fifo, socket or device is refused, never opened); a symlink as the source is
    followed inside the sandbox (``docker cp -L``); inside a downloaded directory a symlink is recreated
    only when its target is relative and stays inside the download (``../`` no deeper than the link),
    other links and special files are skipped, so a download never creates a link out of ``dest``.
kill_processes
    Kills the keeper: the kernel then kills every process of the pid namespace (background jobs,
    ``setsid``/double-forked daemons, tmux servers, processes that ignore SIGTERM) and bwrap exits only
    once all are reaped; tackroom confirms the cgroup (or, without one, /proc) holds none of them, then
    starts a fresh bwrap over the same per-trial root. Files stay; ``/dev/shm`` is emptied.
Cleanup
    Each sandbox writes an owner marker (``<root>.owner.json``, beside the root, out of the agent's
    reach) holding the creating process's pid, start time and boot id, the bwrap's and the keeper's, the
    host uid and the cgroup directories. ``tackroom sandbox cleanup --sandbox local`` removes the roots,
    bwraps and cgroups of every marker whose owner is gone; a live owner's sandboxes are never touched,
    and roots without a marker (made by an older tackroom) are left alone. A sandbox's cgroup is named
    ``tackroom-<creator pid>-<creator start time>-<root>``, so every sandbox start (and every cleanup)
    also removes the cgroups of dead creators, wherever their roots were.

Run as root, bwrap itself runs as the sandbox's host uid; when ``root_dir`` is not searchable by that
uid (a 0700 folder), each bwrap starts in a private mount namespace where the per-trial root is bound at
:data:`STAGE_DIR` for it. The keeper binary is copied into the per-trial root (outside the folders bound
into the sandbox).

The task's Dockerfile is honoured as far as a shared /usr allows: WORKDIR, COPY/ADD (of local files),
ENV, ARG defaults and RUN. FROM is not: the sandbox runs on the host's userland, and the trial result's
notes say so.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import glob
import json
import os
import posixpath
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import Field

from tackroom import (
    ExecResult,
    PluginOptions,
    Sandbox,
    SandboxBuildError,
    SandboxError,
    SandboxPathError,
    SandboxProvider,
    SandboxSpec,
    SandboxTimeoutError,
    TaskError,
    run_process,
)
from tackroom_local.cgroups import (
    _CGROUP_NAME,
    MiB,
    _cgroup_parents,
    _Cgroups,
    _make_cgroups,
    _start_time,
    _sweep_cgroups,
)
from tackroom_local.dockerfile import parse_copy, parse_dockerfile, parse_env
from tackroom_local.view import (
    _INSTALL_HINT,
    _O_READ,
    DEFAULT_PATH,
    WRITABLE_ROOTS,
    _build_view,
    _Deadline,
    _Dir,
    _inside_path,
    _mount_args,
    _searchable_by_all,
    _Walk,
)

KEEPER_PATH = "/.tackroom-keeper"
KEEPER_SCRIPT = (
    'trap "" HUP INT QUIT TERM USR1 USR2 PIPE ALRM TSTP TTIN TTOU; exec {info}>&-; echo ready >&{sock}; '
    "while read -r -u {sock} _ || [ $? -gt 128 ]; do :; done"
)
"""PID 1: signals ignored, no forks; it reaps orphans (bash's SIGCHLD handler) until tackroom's end of
the socket closes."""
STAGE_DIR = Path("/tmp/.tackroom-local-stage")
STAGE_SCRIPT = 'set -e; mount --bind "$2" "$1"; shift 3; exec "$@"'
"""Run as root in a private mount namespace when root_dir is not searchable by the sandbox's uid: the
per-trial root appears at :data:`STAGE_DIR` (for that bwrap only), where the sandbox's uid can reach it."""
JOIN_CGROUPS = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
"""``sh -c`` prefix: move this process into each cgroup.procs named before ``--``, then exec the rest."""
HOST_UID_BASE = 1_000_000_000
MARKER_SUFFIX = ".owner.json"
DISK_SUFFIX = ".disk"
"""Beside a root: the file of its size-limited filesystem (``storage_mb``, run as root)."""


class LocalSandboxOptions(PluginOptions):
    root_dir: str | None = Field(default=None, description="Where per-trial roots live (default: $TMPDIR/tackroom-local)")
    output_limit_bytes: int = Field(default=1_000_000, ge=1024, description="Cap per stream of exec output")
    bwrap: str = Field(default="bwrap", description="The bubblewrap executable")
    keep_root: bool = Field(default=False, description="Keep the per-trial root after stop (debugging)")
    pids_limit: int = Field(
        default=512, ge=16,
        description="Most processes and threads the sandbox may hold at once (cgroup pids.max, else RLIMIT_NPROC); "
                    "a fork bomb stops there and the sandbox stays stoppable",
    )  # fmt: skip
    limits: Literal["auto", "cgroup", "rlimit"] = Field(
        default="auto",
        description='How memory_mb, cpus and pids_limit are enforced: "cgroup" (refuse to start without a writable '
                    'cgroup), "rlimit" (per-process RLIMIT_AS, RLIMIT_NPROC; cpus not enforced) or "auto" (cgroup when '
                    "writable, else rlimit, and the trial's notes say so)",
    )  # fmt: skip
    host_uid: int | None = Field(
        default=None, ge=1, lt=2**31 - 1,
        description="Host uid that root inside the sandbox maps to when tackroom runs as root (default: a fresh "
                    f"unused-looking uid per sandbox from {HOST_UID_BASE}); run unprivileged, it is always your own uid",
    )  # fmt: skip


def _tool(name: str, why: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise SandboxError(f"{name!r} is not installed; the local sandbox needs it ({why}). {_INSTALL_HINT}")
    return found




# -- processes, owner markers --------------------------------------------------------


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _same_process(pid: object, start: object, boot: object) -> bool:
    """Whether ``pid`` is still the process that had ``start`` time in boot ``boot``."""
    if not isinstance(pid, int) or pid <= 0 or boot != _boot_id():
        return False
    return start is not None and _start_time(pid) == start


def _check_private_dir(path: Path) -> None:
    """Roots, markers and the keeper live here: it must be ours and not writable by anyone else."""
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise SandboxError(
            f"{path} must be a directory owned by uid {os.geteuid()} and writable only by it (it holds the local "
            f"sandbox's roots); it is mode {stat.filemode(st.st_mode)} owned by uid {st.st_uid}. Remove it or set "
            "[sandbox] root_dir to another directory"
        )


def _copy_keeper(root: Path) -> Path:
    """An execute-only copy of bash in the per-trial root, outside every folder bound into the sandbox
    (a process running a binary it cannot read is not dumpable, so the agent cannot ptrace its PID 1)."""
    path = root / ".keeper"
    shutil.copyfile(os.path.realpath(shutil.which("bash") or "/bin/bash"), path)
    os.chmod(path, 0o111)
    return path


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _rmtree(path: Path) -> None:
    """``shutil.rmtree`` (fd-based: never follows a link) that also gets through ``chmod 000`` folders."""

    def onexc(func, p, exc):
        if isinstance(exc, FileNotFoundError):
            return
        if isinstance(exc, PermissionError) and os.geteuid() != 0:
            for d in (os.path.dirname(p), p):
                with contextlib.suppress(OSError):
                    if stat.S_ISDIR(os.lstat(d).st_mode):
                        os.chmod(d, 0o700)
            shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) and not os.path.islink(p) else func(p)
            return
        raise exc

    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, onexc=onexc)


# -- the sandbox ----------------------------------------------------------------------


class LocalSandbox(Sandbox):
    """A bubblewrap sandbox; see the module docstring."""

    def __init__(self, spec: SandboxSpec, options: LocalSandboxOptions) -> None:
        super().__init__(spec)
        self.options = options
        self.base = _base_dir(options)
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", spec.name)[:80]
        self.root = self.base / f"{safe}-{uuid.uuid4().hex[:8]}"
        self.env: dict[str, str] = {"PATH": DEFAULT_PATH, "HOME": "/root", "LANG": "C.UTF-8", "TERM": "xterm"}
        self.env.update(spec.env)
        self.workdir = spec.workdir
        self.uid: int | None = None
        """The host uid of root inside (None: tackroom runs unprivileged, so it is tackroom's own)."""
        self._view: _Dir | None = None
        self._cgroups: _Cgroups | None = None
        self._rlimits: list[str] = []
        self._proc: asyncio.subprocess.Process | None = None
        self._child_pid: int | None = None
        self._pidns: int | None = None
        self._pidfd: int | None = None
        self._keeper_sock: socket.socket | None = None
        self._keeper: Path | None = None
        self._stage: Path | None = None
        self._tools: dict[str, str] = {}
        self._inside: dict[str, str] = {}
        self._marker_data: dict | None = None
        self._stopped = False
        self._disk: Path | None = None
        self._ready = asyncio.Event()
        self._ready.set()
        self._lock = asyncio.Lock()

    @property
    def marker(self) -> Path:
        """The owner marker, beside the root (out of the agent's reach)."""
        return self.base / f"{self.root.name}{MARKER_SUFFIX}"

    # -- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        if self._proc is not None:
            return
        if self._stopped:
            raise SandboxError("this sandbox was stopped; create a new one")
        try:
            self._tools = {
                "bwrap": _tool(self.options.bwrap, "bubblewrap makes the namespaces"),
                "nsenter": _tool("nsenter", "every exec enters the sandbox with it"),
                "setpriv": _tool("setpriv", "every exec drops its capabilities with it"),
            }
            await asyncio.to_thread(self._prepare)
            await self._launch(self.spec.start_timeout_sec)
            with contextlib.suppress(SandboxPathError):
                await asyncio.to_thread(self._ensure_dir, self.workdir)
            await self._apply_dockerfile()
        except BaseException:
            await self.stop()
            raise

    def _prepare(self) -> None:
        """Marker, per-trial root, limits: everything on the host before bwrap starts."""
        self.base.mkdir(parents=True, exist_ok=True, mode=0o755)
        _check_private_dir(self.base)
        if os.geteuid() == 0:
            self.uid = self.options.host_uid or HOST_UID_BASE + secrets.randbelow(1 << 28)
        self._marker_data = {
            "root": self.root.name, "pid": os.getpid(), "start_time": _start_time(os.getpid()), "boot_id": _boot_id(),
            "uid": self.uid, "cgroups": [], "bwrap": None, "keeper": None,
        }  # fmt: skip
        _write_json(self.marker, self._marker_data)
        self.root.mkdir(mode=0o755)
        self._limit_storage()
        for name in WRITABLE_ROOTS:
            d = self.root / name
            d.mkdir(mode=0o1777 if name == "tmp" else 0o755)
            d.chmod(0o1777 if name == "tmp" else 0o755)
            if self.uid is not None:
                os.chown(d, self.uid, self.uid)
        self._keeper = _copy_keeper(self.root)
        if self.uid is not None and not _searchable_by_all(self.base):
            if not _searchable_by_all(STAGE_DIR.parent):
                raise SandboxError(f"{self.base} is not searchable by the sandbox's uid {self.uid} and neither is "
                                   f"{STAGE_DIR.parent}; set [sandbox] root_dir to a folder every uid can pass through")
            STAGE_DIR.mkdir(mode=0o755, exist_ok=True)
            _check_private_dir(STAGE_DIR)
            self._stage = STAGE_DIR
            self._tools["unshare"] = _tool("unshare", "it stages a root_dir the sandbox's uid cannot pass through")
        self._view = _build_view(self.root)
        self._inside = {name: _inside_path(name, self._view) for name in ("setpriv", "env", "bash")}
        self._setup_limits()

    def _limit_storage(self) -> None:
        """``storage_mb``: run as root, the per-trial root (every writable folder) is an ext4 filesystem of that
        size on a sparse file beside it, loop-mounted, so writing past it fails inside with ENOSPC."""
        size = self.spec.storage_mb
        if size is None:
            return
        if os.geteuid() != 0:
            self.notes.append(f"storage_mb = {size} is not enforced: the local sandbox needs root to mount a "
                              "size-limited filesystem (the docker sandbox enforces it)")
            return
        disk = self.base / f"{self.root.name}{DISK_SUFFIX}"
        assert self._marker_data is not None
        self._marker_data["disk"] = disk.name
        _write_json(self.marker, self._marker_data)
        with open(disk, "wb") as f:
            f.truncate(size * 1024 * 1024)
        for argv in (["mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", str(disk)],
                     ["mount", "-o", "loop,nodev,nosuid", str(disk), str(self.root)]):
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            if done.returncode != 0:
                raise SandboxError(f"storage_mb = {size}: {argv[0]} failed: {(done.stderr or done.stdout).strip()[:300]}")
        self._disk = disk
        os.chmod(self.root, 0o755)

    def _setup_limits(self) -> None:
        spec, opts = self.spec, self.options
        wanted = f"memory_mb={spec.memory_mb}, cpus={spec.cpus:g}, pids_limit={opts.pids_limit}"
        why = "limits = \"rlimit\" was chosen"
        if opts.limits != "rlimit":
            assert self._marker_data is not None
            name = f"tackroom-{self._marker_data['pid']}-{self._marker_data['start_time']}-{self.root.name}"
            cgroups, skipped, why = _make_cgroups(name, spec.memory_mb, opts.pids_limit, spec.cpus)
            if cgroups is not None:
                self._cgroups = cgroups
                assert self._marker_data is not None
                self._marker_data["cgroups"] = [str(d) for d in cgroups.dirs]
                _write_json(self.marker, self._marker_data)
                if skipped:
                    self.notes.append(f"local sandbox: {', '.join(skipped)} not enforced (no cpu controller in its cgroup)")
                return
            if opts.limits == "cgroup":
                raise SandboxError(
                    f"the local sandbox cannot enforce {wanted} with a cgroup ({why}); run tackroom as root on a host "
                    'with cgroup memory and pids controllers, or set [sandbox] limits = "rlimit" to accept per-process '
                    "rlimits instead"
                )
        self._tools["prlimit"] = _tool("prlimit", "it sets the sandbox's rlimits when no cgroup is writable")
        self._rlimits = [self._tools["prlimit"], f"--as={spec.memory_mb * MiB}", f"--nproc={opts.pids_limit}", "--"]
        self.notes.append(
            f"local sandbox: no writable cgroup ({why}); memory_mb={spec.memory_mb} caps each process's address space "
            f"(RLIMIT_AS), pids_limit={opts.pids_limit} caps the processes of the sandbox's user (RLIMIT_NPROC), "
            f"cpus={spec.cpus:g} is not enforced"
        )

    def _prefix(self) -> list[str]:
        """What every process of the sandbox starts under: joining its cgroups, or its rlimits."""
        if self._cgroups is not None:
            return ["/bin/sh", "-c", JOIN_CGROUPS, "sh", *self._cgroups.procs_files, "--"]
        return list(self._rlimits)

    def _isolation_flags(self) -> list[str]:
        """bwrap's namespaces and privileges: its own user namespace (with no further ones), no capabilities."""
        flags = [
            "--unshare-all", "--unshare-user", "--disable-userns", "--uid", "0", "--gid", "0", "--die-with-parent",
            "--new-session", "--clearenv", "--hostname", "sandbox", "--cap-drop", "ALL", "--as-pid-1",
        ]  # fmt: skip
        if self.spec.allow_internet:
            flags.append("--share-net")
        return flags

    async def _launch(self, timeout: float) -> None:
        """Start bwrap and its keeper over the per-trial root; return once the keeper answers."""
        assert self._view is not None and self._keeper is not None
        mine, theirs = socket.socketpair()
        info_r, info_w = os.pipe()
        sock = theirs.fileno()
        argv = self._prefix()
        remap: dict[str, str] = {}
        keeper = str(self._keeper)
        if self._stage is not None:
            argv += [self._tools["unshare"], "--mount", "--propagation", "private", "--", "/bin/sh", "-c", STAGE_SCRIPT,
                     "sh", str(self._stage), str(self.root), "--"]  # fmt: skip
            remap = {str(self.root): str(self._stage)}
            keeper = str(self._stage / self._keeper.name)
        if self.uid is not None:
            argv += [self._tools["setpriv"], f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "--"]
        argv += [self._tools["bwrap"], *self._isolation_flags()]
        argv += ["--proc", "/proc", "--dev", "/dev", *_mount_args(self._view, remap)]
        argv += ["--ro-bind", keeper, KEEPER_PATH, "--remount-ro", "/"]
        argv += ["--setenv", "PATH", DEFAULT_PATH, "--chdir", "/", "--info-fd", str(info_w)]
        argv += [KEEPER_PATH, "-c", KEEPER_SCRIPT.format(info=info_w, sock=sock)]
        errors = tempfile.TemporaryFile()
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *argv, pass_fds=(sock, info_w), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=errors, start_new_session=True,
            )  # fmt: skip
        except BaseException:
            for f in (mine, errors):
                f.close()
            os.close(info_r)
            raise
        finally:
            os.close(info_w)
            theirs.close()
        try:
            mine.setblocking(False)
            try:
                info = await asyncio.wait_for(_read_info(info_r), timeout)
                ready = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(mine, 16), timeout) if info else b""
            except TimeoutError as exc:
                raise SandboxTimeoutError(f"bwrap did not start within {timeout}s") from exc
            if not info.strip() or ready != b"ready\n":
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._proc.wait(), 5)
                errors.seek(0)
                why = errors.read().decode(errors="replace").strip() or f"exit {self._proc.returncode}"
                if self.uid is not None and ("namespace" in why or "Operation not permitted" in why):
                    why += (f" (bwrap runs as the unprivileged uid {self.uid}: the host must allow unprivileged user "
                            "namespaces, e.g. sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0, "
                            "kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap)")
                raise SandboxError(f"bwrap failed to start: {why}")
        except BaseException:
            mine.close()
            raise
        finally:
            errors.close()
        self._keeper_sock = mine
        parsed = json.loads(info)
        self._child_pid = int(parsed["child-pid"])
        self._pidns = parsed.get("pid-namespace")
        try:
            self._pidfd = os.pidfd_open(self._child_pid)
        except (AttributeError, OSError):
            self._pidfd = None
        if os.geteuid() == 0:
            for pid in (self._proc.pid, self._child_pid):
                with contextlib.suppress(OSError):
                    Path(f"/proc/{pid}/oom_score_adj").write_text("-1000")
        if self._stopped:  # stop() ran while this keeper was starting (kill_processes racing a teardown)
            await self._end_namespace(10)
            raise SandboxError("the sandbox was stopped while kill_processes() restarted it")
        if self._marker_data is not None:
            self._marker_data["bwrap"] = [self._proc.pid, _start_time(self._proc.pid)]
            self._marker_data["keeper"] = [self._child_pid, _start_time(self._child_pid)]
            await asyncio.to_thread(_write_json, self.marker, self._marker_data)

    async def _end_namespace(self, timeout: float) -> None:
        """SIGKILL the keeper; the kernel kills the rest of the pid namespace, bwrap exits once all are reaped."""
        proc = self._proc
        self._signal_keeper()
        if proc is not None and proc.returncode is None:
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()), timeout)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                raise SandboxError(
                    f"the local sandbox's processes did not all die within {timeout:g}s of SIGKILL (a process stuck in "
                    "the kernel, state D?); the trial must not be graded"
                ) from None
        self._release_keeper()

    def _signal_keeper(self) -> None:
        try:
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            elif self._child_pid is not None and self._proc is not None and self._proc.returncode is None:
                os.kill(self._child_pid, signal.SIGKILL)
        except (ProcessLookupError, OSError):
            pass

    def _release_keeper(self) -> None:
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self._pidfd = None
        if self._keeper_sock is not None:
            self._keeper_sock.close()
            self._keeper_sock = None

    def _leftovers(self, pidns: int | None) -> set[int]:
        """Processes of this sandbox still alive: its cgroups' members, else those in its old pid namespace."""
        if self._cgroups is not None:
            return self._cgroups.pids()
        left: set[int] = set()
        if pidns is None:
            return left
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{entry.name}/ns/pid") == f"pid:[{pidns}]":
                        left.add(int(entry.name))
        return left

    async def kill_processes(self, *, timeout: float = 10.0) -> None:
        """Kill the pid namespace (see the module docstring), confirm it is empty, start a fresh keeper."""
        self._alive()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        await self._close_forwards()
        async with self._lock:
            self._ready.clear()
            try:
                pidns = self._pidns
                await self._end_namespace(timeout)
                while left := self._leftovers(pidns):  # host-side nsenter parents exit right after their children
                    if loop.time() > deadline:
                        raise SandboxError(f"processes survived kill_processes(): host pids {sorted(left)} are still "
                                           "alive in the sandbox")
                    await asyncio.sleep(0.002)
                await self._launch(max(1.0, deadline - loop.time()))
            finally:
                self._ready.set()

    async def stop(self) -> None:
        self._stopped = True
        await asyncio.shield(self._close_forwards())
        proc, self._proc = self._proc, None
        self._signal_keeper()
        if proc is not None and proc.returncode is None:
            try:
                await asyncio.shield(asyncio.wait_for(proc.wait(), 5))
            except (TimeoutError, asyncio.CancelledError):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.shield(asyncio.wait_for(proc.wait(), 5))
        self._release_keeper()
        self._ready.set()
        await asyncio.shield(asyncio.to_thread(self._remove_host_state))

    def _remove_host_state(self) -> None:
        """Cgroups, root, marker; the marker stays (for ``cleanup``) when something could not be removed."""
        gone = self._cgroups.remove() if self._cgroups is not None else True
        if not self.options.keep_root:
            try:
                _unmount_disk(self.root, self._disk)
                _rmtree(self.root)
            except (OSError, subprocess.SubprocessError):
                gone = False
        if gone and self._marker_data is not None:
            with contextlib.suppress(FileNotFoundError):
                self.marker.unlink()

    # -- the Dockerfile -------------------------------------------------------------
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
                    await asyncio.to_thread(self._ensure_dir, self.workdir)
                elif ins.keyword == "ENV":
                    self.env.update(parse_env(ins.args))
                elif ins.keyword == "ARG":
                    key, _, default = ins.args.partition("=")
                    if default:
                        args[key.strip()] = default.strip().strip('"')
                elif ins.keyword in ("COPY", "ADD"):
                    await self._copy_from_context(context, ins.args)
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

    async def _copy_from_context(self, context: Path, args: str) -> None:
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
                    await self.upload(src, dest_abs, timeout=self.spec.build_timeout_sec)
                else:
                    into_dir = dest.endswith("/") or many or await asyncio.to_thread(self._is_dir, dest_abs)
                    target = posixpath.join(dest_abs, src.name) if into_dir else dest_abs
                    await self.upload(src, target, timeout=self.spec.build_timeout_sec)

    # -- commands -------------------------------------------------------------------
    def _alive(self) -> None:
        if self._proc is None or self._child_pid is None:
            raise SandboxError("sandbox is not running (never started, or stopped)")
        if self._proc.returncode is not None:
            raise SandboxError(f"sandbox died (bwrap exited with {self._proc.returncode})")

    async def _wait_ready(self, timeout: float) -> None:
        if not self._ready.is_set():
            try:
                await asyncio.wait_for(self._ready.wait(), timeout)
            except TimeoutError as exc:
                raise SandboxTimeoutError(f"the sandbox was still restarting after {timeout}s") from exc

    async def exec(self, cmd, *, cwd=None, env=None, timeout=600.0, stdin=None) -> ExecResult:
        await self._wait_ready(timeout)
        self._alive()
        merged = dict(self.env)
        merged.update(env or {})
        # setpriv runs with every capability of the sandbox's user namespace until it drops them: by its
        # absolute path in read-only /usr and with an empty environment (no LD_* from the task's env).
        inside = self._inside
        argv = self._prefix() + [
            self._tools["nsenter"], "-t", str(self._child_pid), "-U", "-m", "-u", "-i", "-n", "-p", "-C", "-r", "-w", "--",
            inside["setpriv"], "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--", inside["env"], "-i",
        ]  # fmt: skip
        argv += [f"{k}={v}" for k, v in merged.items()]
        workdir = cwd or self.workdir
        script = cmd if isinstance(cmd, str) else " ".join(_quote(c) for c in cmd)
        argv += [inside["bash"], "-c", f"cd {_quote(workdir)} || exit 1\n{script}"]
        data = stdin.encode() if isinstance(stdin, str) else stdin
        out = await run_process(argv, timeout=timeout, stdin=data, output_limit=self.options.output_limit_bytes, env={})
        if out.timed_out:
            raise SandboxTimeoutError(f"command timed out after {timeout}s: {script[:200]}")
        self._alive()
        stderr = out.stderr.decode(errors="replace")
        if out.returncode == 125 and "cgroup.procs" in stderr:
            raise SandboxError(f"could not move the command into the sandbox's cgroup: {stderr.strip()[:300]}")
        return ExecResult(
            exit_code=out.returncode,
            stdout=out.stdout.decode(errors="replace"),
            stderr=stderr,
            truncated=out.truncated,
            duration_s=out.duration_s,
        )

    # -- files ----------------------------------------------------------------------
    def _parts(self, path: str) -> list[str]:
        if not isinstance(path, str) or not path or "\x00" in path:
            raise SandboxPathError(f"invalid sandbox path {path!r}")
        if not path.startswith("/"):
            path = posixpath.join(self.workdir, path)
        if ".." in path.split("/"):
            raise SandboxPathError(f"path {path!r} contains '..'; use a path without parent references")
        return [p for p in posixpath.normpath(path).split("/") if p]

    @contextlib.contextmanager
    def _walk(self, path: str, timeout: float) -> Iterator[_Walk]:
        assert self._view is not None
        walk = _Walk(self._view, path, time.monotonic() + timeout, self.uid)
        try:
            yield walk
        except _Deadline:
            raise SandboxTimeoutError(f"transfer of {path} took longer than {timeout}s") from None
        finally:
            walk.close()

    def _is_dir(self, path: str) -> bool:
        """Whether ``path`` is a folder as the sandbox sees it (Docker's COPY puts a file into one)."""
        with self._walk(path, 60) as walk:
            try:
                return walk.locate(self._parts(path)).kind == "dir"
            except (OSError, SandboxPathError):
                return False

    def _ensure_dir(self, path: str) -> None:
        with self._walk(path, 60) as walk:
            walk.ensure_dir(self._parts(path), replace_last=False)

    def _upload(self, source: Path, dest: str, timeout: float) -> None:
        parts = self._parts(dest)
        with self._walk(dest, timeout) as walk:
            if source.is_dir():
                walk.put_tree(walk.ensure_dir(parts, replace_last=True), str(source))
            else:
                if not parts:
                    raise SandboxPathError(f"cannot upload a file to {dest!r}")
                walk.put_file(walk.ensure_dir(parts[:-1], replace_last=False), parts[-1], str(source))

    def _download(self, source: str, dest: Path, timeout: float) -> None:
        parts = self._parts(source)
        dest = Path(os.path.abspath(dest))
        with self._walk(source, timeout) as walk:
            found = walk.locate(parts)
            if found.kind == "missing":
                raise FileNotFoundError(errno.ENOENT, "no such file or directory in the sandbox", source)
            if found.kind == "dir":
                if found.here.fd is None:
                    raise SandboxPathError(f"{source!r} is not a folder that can be downloaded (the writable roots, /usr "
                                           "and the folders bound into /etc can)")
                if dest.exists() and not dest.is_dir():
                    raise NotADirectoryError(errno.ENOTDIR, "cannot download a folder over a file", str(dest))
                dest.mkdir(parents=True, exist_ok=True)
                host = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    walk.get_tree(found.here.fd, host, 0)
                finally:
                    os.close(host)
                return
            if found.kind == "host_file":
                fd = os.open(found.host, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            else:
                assert found.st is not None and found.here.fd is not None
                if not stat.S_ISREG(found.st.st_mode):
                    raise SandboxPathError(f"{source!r} is a {_kind(found.st.st_mode)}; only regular files and folders "
                                           "are downloaded")
                try:
                    fd = os.open(found.name, _O_READ, dir_fd=found.here.fd)
                except OSError as exc:
                    raise SandboxPathError(f"{source!r} changed during the download") from exc
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise SandboxPathError(f"{source!r} is a {_kind(st.st_mode)}; only regular files and folders are "
                                           "downloaded")
                if dest.is_dir() and not dest.is_symlink():
                    raise IsADirectoryError(errno.EISDIR, "cannot download a file over a folder", str(dest))
                dest.parent.mkdir(parents=True, exist_ok=True)
                parent = os.open(dest.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    walk._host_put(fd, st, parent, dest.name)
                finally:
                    os.close(parent)
            finally:
                os.close(fd)

    async def _transfer(self, what: str, fn, *args, timeout: float) -> None:
        await self._wait_ready(timeout)
        self._alive()
        try:
            await asyncio.wait_for(asyncio.to_thread(fn, *args, timeout), timeout + 5)
        except TimeoutError as exc:
            raise SandboxTimeoutError(f"{what} took longer than {timeout}s") from exc
        except (SandboxError, FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise
        except OSError as exc:
            raise SandboxError(f"{what} failed: {exc}") from exc

    async def upload(self, source: Path, dest: str, *, timeout: float = 120.0) -> None:
        source = Path(source)
        if not source.exists():
            raise FileNotFoundError(str(source))
        await self._transfer(f"upload of {source} to {dest}", self._upload, source, dest, timeout=timeout)

    async def download(self, source: str, dest: Path, *, timeout: float = 120.0) -> None:
        await self._transfer(f"download of {source}", self._download, source, Path(dest), timeout=timeout)

    async def restore_image_tools(self, keep: list[str] | None = None) -> list[str]:
        """Nothing to restore: ``/usr`` is the host's, read-only, and ``/`` a read-only tmpfs, so the agent can
        change no executable or library there (tests/security/test_grading_attacks.py checks it). A tool it
        planted in a writable root on ``PATH`` is not run by the verifier's commands, whose ``PATH`` is the
        sandbox's fixed one."""
        return []

    async def forward_host_port(self, port: int) -> str:
        if self.spec.allow_internet:
            return f"http://127.0.0.1:{port}"  # the sandbox shares the host's network
        await self._wait_ready(30)
        self._alive()
        assert self._child_pid is not None
        return await self._open_forward(self._child_pid, port, enter_user=True)

    async def expose(self, port: int) -> str:
        if not self.spec.allow_internet:
            raise SandboxError(
                "the local sandbox shares no network with the host unless the task allows it "
                "([environment] allow_internet = true); talk to servers inside it through exec (stdio) instead"
            )
        return f"http://127.0.0.1:{port}"


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISLNK, "symlink"), (stat.S_ISDIR, "folder")):  # fmt: skip
        if test(mode):
            return name
    return "special file"


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


# -- leaked sandboxes -----------------------------------------------------------------


def _cleanup(base: Path) -> int:
    """Remove what every sandbox whose owner process is gone left behind; return how many roots went."""
    if not base.is_dir():
        return 0
    _check_private_dir(base)
    removed = 0
    for marker in sorted(base.glob(f"*{MARKER_SUFFIX}")):
        try:
            data = json.loads(marker.read_text())
            name = data["root"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _same_process(data.get("pid"), data.get("start_time"), data.get("boot_id")):
            continue  # a live run's sandbox
        for key in ("keeper", "bwrap"):  # the keeper's death empties the pid namespace
            proc = data.get(key)
            if isinstance(proc, list) and len(proc) == 2 and _same_process(proc[0], proc[1], data.get("boot_id")):
                with contextlib.suppress(OSError):
                    os.kill(proc[0], signal.SIGKILL)
        cgroups = [Path(p) for p in data.get("cgroups") or [] if _is_our_cgroup(p, name)]
        cgroups_gone = _Cgroups(cgroups).remove(wait=5) if cgroups else True
        root = base / name if isinstance(name, str) and "/" not in name and name not in ("", ".", "..") else None
        if root is not None and (root.exists() or root.is_symlink()):
            disk = data.get("disk")
            _unmount_disk(root, base / disk if isinstance(disk, str) and disk == f"{name}{DISK_SUFFIX}" else None)
            _rmtree(root)
            removed += 1
        if cgroups_gone:
            marker.unlink(missing_ok=True)
    return removed


def _unmount_disk(root: Path, disk: Path | None) -> None:
    """Unmount ``storage_mb``'s filesystem from ``root`` (when mounted) and remove its file."""
    if os.path.ismount(root):
        subprocess.run(["umount", "-l", str(root)], capture_output=True, timeout=60, check=True)
    if disk is not None:
        disk.unlink(missing_ok=True)


def _base_dir(options: LocalSandboxOptions) -> Path:
    """Where the per-trial roots and their owner markers live (links in the configured path resolved once)."""
    return Path(os.path.realpath(options.root_dir or Path(tempfile.gettempdir()) / "tackroom-local"))


def _is_our_cgroup(path: object, root_name: str) -> bool:
    return isinstance(path, str) and path.startswith("/sys/fs/cgroup/") and ".." not in path.split("/") \
        and bool(_CGROUP_NAME.match(Path(path).name)) and Path(path).name.endswith(f"-{root_name}")  # fmt: skip


class LocalSandboxProvider(SandboxProvider):
    """Per-trial root under bubblewrap with the host's /usr read-only; no network by default."""

    name = "local"
    Options = LocalSandboxOptions
    capabilities = frozenset({"persistent_processes"})

    def create(self, spec: SandboxSpec) -> LocalSandbox:
        return LocalSandbox(spec, self.options)

    def _base(self) -> Path:
        return _base_dir(self.options)

    async def cleanup(self) -> int:
        """Remove the roots, bwraps and cgroups of sandboxes whose creating process is gone (never a live run's).

        Returns how many roots went; cgroups whose creator is gone are removed too, wherever their root was.
        """

        def run() -> int:
            removed = _cleanup(self._base())
            with contextlib.suppress(OSError):
                _sweep_cgroups(_cgroup_parents())
            return removed

        return await asyncio.to_thread(run)
