"""The ``local`` sandbox: a per-trial root under bubblewrap, the embedded default.

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
    refuses to start with a :class:`SandboxError` that names the limits. Disk use is not limited.
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
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import Field

from tackroom._dockerfile import parse_copy, parse_dockerfile, parse_env
from tackroom._errors import TaskError
from tackroom._markers import hookimpl
from tackroom._plugin import PluginOptions
from tackroom._process import run_process
from tackroom._sandbox import (
    ExecResult,
    Sandbox,
    SandboxBuildError,
    SandboxError,
    SandboxPathError,
    SandboxProvider,
    SandboxSpec,
    SandboxTimeoutError,
)
from tackroom._tar_transfer import open_host_dir

WRITABLE_ROOTS = ("app", "logs", "tests", "solution", "tmp", "root", "home", "workspace", "data", "output", "srv", "opt")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ETC_FILES = (
    "passwd", "group", "hosts", "host.conf", "resolv.conf", "nsswitch.conf", "gai.conf",
    "networks", "protocols", "services", "rpc", "ethertypes",
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
    "alternatives", "ssl/certs", "ssl/openssl.cnf", "ca-certificates", "ca-certificates.conf",
    "pki/tls/certs", "pki/ca-trust/extracted",
    "localtime", "timezone", "locale.alias", "locale.conf", "default/locale",
    "bash.bashrc", "profile", "inputrc", "shells", "terminfo", "skel", "login.defs",
    "magic", "magic.mime", "mime.types", "mailcap",
    "debian_version", "os-release", "lsb-release", "issue", "redhat-release", "alpine-release", "system-release",
    "python3", "python3.*", "perl", "java-*", "fonts", "vim", "xdg", "manpath.config",
)  # fmt: skip
"""What of the host's /etc the sandbox sees (read-only): what shells and common tools read. Never
shadow, gshadow, sudoers, ssh/, ssl/private, pip.conf, npmrc, environment, profile.d/ (where hosts keep
exported credentials) or anything else that may hold secrets."""
ETC_LINKS = {"mtab": "/proc/self/mounts"}
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
MiB = 1024 * 1024
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_O_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_O_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20
_MAX_LINKS = 40


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


_INSTALL_HINT = (
    "Install it with `apt-get install bubblewrap util-linux` (Debian/Ubuntu) or `dnf install bubblewrap util-linux`, "
    "or select another sandbox (e.g. --sandbox docker)"
)


# -- processes, owner markers --------------------------------------------------------


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22), or None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 else None


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


# -- limits: cgroups or rlimits -------------------------------------------------------


@dataclass
class _Cgroups:
    """The cgroup directories of one sandbox; bwrap and every exec join all of them."""

    dirs: list[Path]

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def pids(self) -> set[int]:
        found: set[int] = set()
        for d in self.dirs:
            with contextlib.suppress(OSError):
                found |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
        return found

    def kill(self) -> None:
        for d in self.dirs:
            with contextlib.suppress(OSError):
                (d / "cgroup.kill").write_text("1")
        for pid in self.pids():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def remove(self, wait: float = 5.0) -> bool:
        """rmdir every directory (a cgroup empties a moment after its last process is reaped)."""
        deadline = time.monotonic() + wait
        left = list(self.dirs)
        while left:
            for d in list(left):
                try:
                    d.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    continue
                left.remove(d)
            if not left or time.monotonic() > deadline:
                break
            self.kill()
            time.sleep(0.02)
        return not left


def _cgroup_mounts() -> tuple[Path | None, dict[str, tuple[Path, str]]]:
    """(the cgroup2 mount, {v1 controller: (mount point, mount root)}) from /proc/self/mountinfo."""
    v2: Path | None = None
    v1: dict[str, tuple[Path, str]] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            parts, rparts = left.split(), right.split()
            if len(parts) < 5 or len(rparts) < 3:
                continue
            root, mount = parts[3], Path(parts[4].replace("\\040", " "))
            if rparts[0] == "cgroup2" and v2 is None:
                v2 = mount
            elif rparts[0] == "cgroup":
                for opt in rparts[2].split(","):
                    if opt in ("memory", "pids", "cpu"):
                        v1.setdefault(opt, (mount, root))
    return v2, v1


def _own_cgroups() -> dict[str, str]:
    """{controller: path} of this process (``""`` for the cgroup v2 path)."""
    own: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                own[c] = path
    return own


_CGROUP_NAME = re.compile(r"tackroom-(\d+)-(\d+)-")
"""A sandbox's cgroup is named ``tackroom-<creator pid>-<creator start time>-<root name>``."""


def _cgroup_parents() -> list[Path]:
    """Where sandbox cgroups are made: cgroup v2's ``tackroom-local``, and cgroup v1's folder of this process."""
    v2, v1 = _cgroup_mounts()
    parents = [v2 / "tackroom-local"] if v2 is not None else []
    own = _own_cgroups()
    for controller, (mount, mount_root) in v1.items():
        path = own.get(controller, "/")
        if mount_root != "/" and path.startswith(mount_root):
            path = path[len(mount_root) :]
        if (mount / path.lstrip("/")) not in parents:
            parents.append(mount / path.lstrip("/"))
    return parents


def _sweep_cgroups(parents: Sequence[Path]) -> int:
    """Remove the cgroups of sandboxes whose creating process is gone (killing what still runs in them)."""
    removed = 0
    for parent in parents:
        try:
            entries = [d for d in parent.iterdir() if _CGROUP_NAME.match(d.name) and d.is_dir()]
        except OSError:
            continue
        for d in entries:
            m = _CGROUP_NAME.match(d.name)
            assert m is not None
            if _start_time(int(m[1])) != int(m[2]) and _Cgroups([d]).remove(wait=1):
                removed += 1
    return removed


def _make_cgroups(name: str, memory_mb: int, pids_limit: int, cpus: float) -> tuple[_Cgroups | None, list[str], str]:
    """Create and configure the sandbox's cgroups: (cgroups, limits not enforced, why there are none)."""
    with contextlib.suppress(OSError):
        _sweep_cgroups(_cgroup_parents())  # what sandboxes of killed runs left
    v2, v1 = _cgroup_mounts()
    reasons: list[str] = []
    if v2 is not None and (v2 / "cgroup.controllers").exists():
        made: list[Path] = []
        try:
            available = (v2 / "cgroup.controllers").read_text().split()
            if not {"memory", "pids"} <= set(available):
                raise OSError(f"the memory and pids controllers are not available in {v2} (only {available})")
            wanted = [c for c in ("memory", "pids", "cpu") if c in available]
            parent = v2 / "tackroom-local"
            parent.mkdir(exist_ok=True)
            for d in (v2, parent):
                have = (d / "cgroup.subtree_control").read_text().split()
                missing = [c for c in wanted if c not in have]
                if missing:
                    (d / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in missing))
            cg = parent / name
            cg.mkdir()
            made.append(cg)
            (cg / "memory.max").write_text(str(memory_mb * MiB))
            with contextlib.suppress(FileNotFoundError):
                (cg / "memory.swap.max").write_text("0")
            (cg / "pids.max").write_text(str(pids_limit))
            skipped = []
            if "cpu" in wanted:
                (cg / "cpu.max").write_text(f"{max(1000, int(cpus * 100_000))} 100000")
            else:
                skipped.append("cpus")
            return _Cgroups([cg]), skipped, ""
        except OSError as exc:
            reasons.append(f"cgroup v2 at {v2}: {exc}")
            for d in made:
                with contextlib.suppress(OSError):
                    d.rmdir()
    if "memory" in v1 and "pids" in v1:
        own = _own_cgroups()
        made = []
        try:
            dirs: dict[str, Path] = {}
            for controller in ("memory", "pids", "cpu"):
                if controller not in v1:
                    continue
                mount, mount_root = v1[controller]
                path = own.get(controller, "/")
                if mount_root != "/" and path.startswith(mount_root):
                    path = path[len(mount_root) :]
                d = mount / path.lstrip("/") / name
                if d not in made:
                    d.mkdir()
                    made.append(d)
                dirs[controller] = d
            (dirs["memory"] / "memory.limit_in_bytes").write_text(str(memory_mb * MiB))
            with contextlib.suppress(OSError):  # swap accounting may be off; there is no swap to use then
                (dirs["memory"] / "memory.memsw.limit_in_bytes").write_text(str(memory_mb * MiB))
            (dirs["pids"] / "pids.max").write_text(str(pids_limit))
            skipped = []
            if "cpu" in dirs:
                (dirs["cpu"] / "cpu.cfs_period_us").write_text("100000")
                (dirs["cpu"] / "cpu.cfs_quota_us").write_text(str(max(1000, int(cpus * 100_000))))
            else:
                skipped.append("cpus")
            return _Cgroups(made), skipped, ""
        except OSError as exc:
            reasons.append(f"cgroup v1: {exc}")
            for d in reversed(made):
                with contextlib.suppress(OSError):
                    d.rmdir()
    else:
        reasons.append("cgroup v1: no memory and pids hierarchies mounted")
    return None, [], "; ".join(reasons)


# -- the sandbox's view of the filesystem --------------------------------------------


@dataclass(frozen=True)
class _Bind:
    host: str
    writable: bool = False


@dataclass(frozen=True)
class _Link:
    target: str


@dataclass(frozen=True)
class _Opaque:
    """A mount that transfers never reach (/proc, /dev)."""


@dataclass
class _Dir:
    """A directory of bwrap's own (read-only tmpfs) root: its entries are binds, links or more of these."""

    children: dict[str, _Bind | _Link | _Opaque | _Dir] = field(default_factory=dict)


def _build_view(root: Path) -> _Dir:
    """What the sandbox sees at ``/``; bwrap's mounts and the transfers are both made from it."""
    top = _Dir()
    for name in WRITABLE_ROOTS:
        top.children[name] = _Bind(str(root / name), writable=True)
    top.children["usr"] = _Bind("/usr")
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = f"/{name}"
        if os.path.islink(host):
            top.children[name] = _Link(os.readlink(host))
        elif os.path.isdir(host):
            top.children[name] = _Bind(host)
    etc = _Dir()
    for pattern in ETC_FILES:
        for host in sorted(glob.glob(f"/etc/{pattern}")):
            real = os.path.realpath(host)
            if not os.path.exists(real):
                continue
            *parents, leaf = host[len("/etc/") :].split("/")
            node = etc
            for p in parents:
                child = node.children.setdefault(p, _Dir())
                if not isinstance(child, _Dir):
                    break
                node = child
            else:
                node.children[leaf] = _Bind(real)
    for name, target in ETC_LINKS.items():
        etc.children[name] = _Link(target)
    top.children["etc"] = etc
    top.children["proc"] = _Opaque()
    top.children["dev"] = _Opaque()
    return top


def _mount_args(node: _Dir, remap: dict[str, str], prefix: str = "") -> list[str]:
    """bwrap's arguments for ``node``; ``remap`` replaces host path prefixes (the staged per-trial root)."""
    args: list[str] = []
    for name, child in node.children.items():
        dest = f"{prefix}/{name}"
        if isinstance(child, _Bind):
            host = child.host
            for old, new in remap.items():
                if host == old or host.startswith(old + "/"):
                    host = new + host[len(old) :]
            args += ["--bind" if child.writable else "--ro-bind", host, dest]
        elif isinstance(child, _Link):
            args += ["--symlink", child.target, dest]
        elif isinstance(child, _Dir):
            args += ["--dir", dest, *_mount_args(child, remap, dest)]
    return args


def _inside_path(name: str, view: _Dir) -> str:
    """The absolute path of a host tool as the sandbox sees it, which must lie in a read-only bind (/usr):
    ``nsenter`` starts it with every capability of the sandbox's user namespace, so a PATH lookup could run
    a binary the agent planted in a writable root."""
    found = shutil.which(name, path=DEFAULT_PATH)
    real = os.path.realpath(found) if found else ""
    entry = view.children.get(real.split("/")[1]) if real.count("/") > 1 else None
    if not isinstance(entry, _Bind) or entry.writable:
        raise SandboxError(f"{name!r} must be installed under /usr (found {found or 'nothing'}): the local sandbox runs it "
                           f"inside the sandbox by its absolute path. {_INSTALL_HINT}")
    return real


def _searchable_by_all(path: Path) -> bool:
    """Whether every folder down to ``path`` lets any uid through (bwrap runs as the sandbox's uid)."""
    try:
        return all(os.stat(p).st_mode & stat.S_IXOTH for p in (path, *path.parents))
    except OSError:
        return False


class _Deadline(Exception):
    pass


@dataclass
class _Here:
    """A directory of the view: a real one (``fd``) or one of bwrap's own (``node``)."""

    parts: tuple[str, ...]
    fd: int | None = None
    node: _Dir | None = None
    writable: bool = False


@dataclass
class _Found:
    kind: Literal["dir", "entry", "host_file", "missing"]
    here: _Here
    name: str = ""
    st: os.stat_result | None = None
    host: str = ""


class _Walk:
    """One transfer: resolves sandbox paths with dir fds and O_NOFOLLOW, links as the sandbox sees them."""

    def __init__(self, view: _Dir, path: str, deadline: float, uid: int | None) -> None:
        self.view, self.path, self.deadline, self.uid = view, path, deadline, uid
        self.fds: list[int] = []
        self.links = 0
        self.steps = 0
        self.retries = 0

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()

    def tick(self) -> None:
        self.steps += 1
        if time.monotonic() > self.deadline:
            raise _Deadline

    def retry(self) -> None:
        """Something changed under the walk (a folder swapped for a link): look again, a bounded number of times."""
        self.retries += 1
        if self.retries > 1000:
            raise SandboxError(f"{self.path!r} kept changing during the transfer")

    def _open(self, name: str, dir_fd: int | None) -> int:
        fd = os.open(name, _O_DIR if dir_fd is not None else os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
        self.fds.append(fd)
        return fd

    def _follow(self, target: str, here: _Here, todo: deque[str]) -> _Here:
        self.links += 1
        if self.links > _MAX_LINKS:
            raise SandboxPathError(f"{self.path!r}: too many levels of symbolic links")
        todo.extendleft(reversed(target.split("/")))
        return _Here((), node=self.view) if target.startswith("/") else here

    def _reopen(self, parts: tuple[str, ...]) -> _Here:
        found = self.locate(list(parts))
        if found.kind != "dir":
            raise FileNotFoundError(errno.ENOENT, "a parent folder changed during the transfer", self.path)
        return found.here

    def locate(self, parts: Sequence[str], follow_last: bool = True) -> _Found:
        """Find ``parts`` as the sandbox would; the kernel never follows a link on the way."""
        todo: deque[str] = deque(parts)
        here = _Here((), node=self.view)
        while todo:
            self.tick()
            name = todo.popleft()
            last = not todo
            if name in ("", "."):
                continue
            if name == "..":
                here = self._reopen(here.parts[:-1])
                continue
            if here.fd is None:
                assert here.node is not None
                child = here.node.children.get(name)
                if child is None:
                    if last:
                        return _Found("missing", here, name)
                    raise FileNotFoundError(errno.ENOENT, "no such file or directory in the sandbox", self.path)
                if isinstance(child, _Opaque):
                    raise SandboxPathError(f"{self.path!r} is under /{name}, which files are never copied to or from")
                if isinstance(child, _Link):
                    here = self._follow(child.target, here, todo)
                elif isinstance(child, _Dir):
                    here = _Here((*here.parts, name), node=child)
                else:
                    st = os.stat(child.host)
                    if stat.S_ISDIR(st.st_mode):
                        here = _Here((*here.parts, name), fd=self._open(child.host, None), writable=child.writable)
                    elif last:
                        return _Found("host_file", here, name, st=st, host=child.host)
                    else:
                        raise FileNotFoundError(errno.ENOTDIR, "not a directory in the sandbox", self.path)
                continue
            try:
                st = os.stat(name, dir_fd=here.fd, follow_symlinks=False)
            except FileNotFoundError:
                if last:
                    return _Found("missing", here, name)
                raise FileNotFoundError(errno.ENOENT, "no such file or directory in the sandbox", self.path) from None
            if stat.S_ISLNK(st.st_mode) and (follow_last or not last):
                here = self._follow(os.readlink(name, dir_fd=here.fd), here, todo)
            elif stat.S_ISDIR(st.st_mode):
                try:
                    fd = self._open(name, here.fd)
                except OSError as exc:  # swapped for a link or removed since the stat: look again
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                        raise
                    self.retry()
                    todo.appendleft(name)
                    continue
                here = _Here((*here.parts, name), fd=fd, writable=here.writable)
            elif last:
                return _Found("entry", here, name, st=st)
            else:
                raise FileNotFoundError(errno.ENOTDIR, "not a directory in the sandbox", self.path)
        return _Found("dir", here)

    # -- writing --------------------------------------------------------------------
    def _chown(self, name: str, dir_fd: int) -> None:
        if self.uid is not None:
            os.chown(name, self.uid, self.uid, dir_fd=dir_fd, follow_symlinks=False)

    def _remove(self, here: _Here, name: str) -> None:
        assert here.fd is not None
        try:
            st = os.stat(name, dir_fd=here.fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(name, dir_fd=here.fd)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=here.fd)

    def _mkdir(self, here: _Here, name: str, mode: int = 0o755) -> None:
        assert here.fd is not None
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, mode, dir_fd=here.fd)
            self._chown(name, here.fd)

    def ensure_dir(self, parts: Sequence[str], *, replace_last: bool) -> _Here:
        """A writable real directory at ``parts``, created as needed.

        A link among the parents is followed when it leads to a directory in the writable roots, else it
        (like a file, fifo or socket there) is replaced by a directory; with ``replace_last`` a link at
        ``parts`` itself is replaced, never followed.
        """
        todo: deque[str] = deque(parts)
        here = _Here((), node=self.view)
        while todo:
            self.tick()
            name = todo.popleft()
            last = not todo
            if name in ("", "."):
                continue
            if name == "..":
                here = self._reopen(here.parts[:-1])
                continue
            if here.fd is None:
                assert here.node is not None
                child = here.node.children.get(name)
                if isinstance(child, _Link):
                    here = self._follow(child.target, here, todo)
                    continue
                if isinstance(child, _Bind) and child.writable:
                    here = _Here((*here.parts, name), fd=self._open(child.host, None), writable=True)
                    continue
                allowed = ", ".join(f"/{r}" for r in WRITABLE_ROOTS)
                raise SandboxPathError(f"{self.path!r} is outside the local sandbox's writable roots ({allowed})")
            if not here.writable:
                raise SandboxPathError(f"{self.path!r} leads into a read-only part of the local sandbox")
            try:
                st = os.stat(name, dir_fd=here.fd, follow_symlinks=False)
            except FileNotFoundError:
                self.retry()
                self._mkdir(here, name)
                todo.appendleft(name)
                continue
            if stat.S_ISDIR(st.st_mode):
                try:
                    fd = self._open(name, here.fd)
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                        raise
                    self.retry()
                    todo.appendleft(name)
                    continue
                here = _Here((*here.parts, name), fd=fd, writable=True)
                continue
            if stat.S_ISLNK(st.st_mode) and not (last and replace_last):
                target = os.readlink(name, dir_fd=here.fd)
                sub = [*target.split("/")] if target.startswith("/") else [*here.parts, *target.split("/")]
                with contextlib.suppress(OSError, SandboxPathError):
                    found = self.locate(sub)
                    if found.kind == "dir" and found.here.fd is not None and found.here.writable:
                        here = found.here
                        continue
            self.retry()
            self._remove(here, name)  # a dangling/escaping/read-only link, a file, a fifo, a socket
            todo.appendleft(name)
        if here.fd is None or not here.writable:
            raise SandboxPathError(f"{self.path!r} is not a writable folder of the local sandbox")
        return here

    def _replace(self, here: _Here, tmp: str, name: str) -> None:
        assert here.fd is not None
        for _ in range(10):
            try:
                os.rename(tmp, name, src_dir_fd=here.fd, dst_dir_fd=here.fd)
                return
            except OSError as exc:
                if exc.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                    raise
                self._remove(here, name)
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=here.fd)
        raise SandboxError(f"{self.path!r} kept changing during the transfer")

    def _copy(self, src: int, dst: int) -> None:
        while chunk := os.read(src, _CHUNK):
            if time.monotonic() > self.deadline:
                raise _Deadline
            view = memoryview(chunk)
            while view:
                view = view[os.write(dst, view) :]

    def put_file(self, here: _Here, name: str, source: str) -> None:
        assert here.fd is not None
        if not name or name in (".", ".."):
            raise SandboxPathError(f"{self.path!r} is not a file path")
        st = os.stat(source)
        tmp = f".tackroom-upload-{secrets.token_hex(6)}"
        fd = os.open(tmp, _O_NEW, 0o600, dir_fd=here.fd)
        try:
            with open(source, "rb") as src:
                self._copy(src.fileno(), fd)
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & 0o1777)
            if self.uid is not None:
                os.fchown(fd, self.uid, self.uid)
            os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=here.fd)
            raise
        os.close(fd)
        self._replace(here, tmp, name)

    def put_link(self, here: _Here, name: str, target: str) -> None:
        assert here.fd is not None
        tmp = f".tackroom-upload-{secrets.token_hex(6)}"
        os.symlink(target, tmp, dir_fd=here.fd)
        self._chown(tmp, here.fd)
        self._replace(here, tmp, name)

    def put_tree(self, here: _Here, source: str) -> None:
        assert here.fd is not None
        with os.scandir(source) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            self.tick()
            if entry.is_symlink():
                self.put_link(here, entry.name, os.readlink(entry.path))
            elif entry.is_dir():
                mode = stat.S_IMODE(entry.stat().st_mode) & 0o1777
                sub = self._child_dir(here, entry.name, mode)
                try:
                    self.put_tree(sub, entry.path)
                finally:
                    assert sub.fd is not None
                    os.close(sub.fd)
            elif entry.is_file():
                self.put_file(here, entry.name, entry.path)

    def _child_dir(self, here: _Here, name: str, mode: int) -> _Here:
        """A real directory ``name`` in ``here`` (whatever else is there is replaced); its fd is the caller's."""
        assert here.fd is not None
        for _ in range(10):
            try:
                fd = os.open(name, _O_DIR, dir_fd=here.fd)
                return _Here((*here.parts, name), fd=fd, writable=True)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                self._remove(here, name)
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=here.fd)
                fd = os.open(name, _O_DIR, dir_fd=here.fd)
                os.fchmod(fd, mode)
                if self.uid is not None:
                    os.fchown(fd, self.uid, self.uid)
                return _Here((*here.parts, name), fd=fd, writable=True)
        raise SandboxError(f"{self.path!r} kept changing during the transfer")

    # -- reading --------------------------------------------------------------------
    def get_tree(self, src: int, dst: int, depth: int) -> None:
        with os.scandir(src) as it:
            names = sorted(e.name for e in it)
        for name in names:
            self.tick()
            try:
                st = os.stat(name, dir_fd=src, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                try:
                    sub = os.open(name, _O_DIR, dir_fd=src)
                except OSError:
                    continue  # swapped for something else meanwhile
                try:
                    host = open_host_dir(dst, name)
                    try:
                        self.get_tree(sub, host, depth + 1)
                    finally:
                        os.close(host)
                finally:
                    os.close(sub)
            elif stat.S_ISREG(st.st_mode):
                try:
                    fd = os.open(name, _O_READ, dir_fd=src)
                except OSError:
                    continue
                try:
                    got = os.fstat(fd)
                    if stat.S_ISREG(got.st_mode):
                        self._host_put(fd, got, dst, name)
                finally:
                    os.close(fd)
            elif stat.S_ISLNK(st.st_mode):
                target = os.readlink(name, dir_fd=src)
                if _link_stays_inside(target, depth):
                    tmp = f".tackroom-dl-{secrets.token_hex(6)}"
                    os.symlink(target, tmp, dir_fd=dst)
                    _host_replace(dst, tmp, name)
            # fifos, sockets and devices are never opened nor copied

    def _host_put(self, src: int, st: os.stat_result, dst_dir: int, name: str) -> None:
        tmp = f".tackroom-dl-{secrets.token_hex(6)}"
        fd = os.open(tmp, _O_NEW, 0o600, dir_fd=dst_dir)
        try:
            self._copy(src, fd)
            os.fchmod(fd, 0o755 if st.st_mode & 0o100 else 0o644)
            os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dst_dir)
            raise
        os.close(fd)
        _host_replace(dst_dir, tmp, name)


def _host_replace(dir_fd: int, tmp: str, name: str) -> None:
    try:
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
            raise
        shutil.rmtree(name, dir_fd=dir_fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def _link_stays_inside(target: str, depth: int) -> bool:
    """A relative target made of leading ``..`` (no more than ``depth``) then names cannot leave the download."""
    if not target or target.startswith("/"):
        return False
    parts = [p for p in target.split("/") if p not in ("", ".")]
    ups = 0
    while ups < len(parts) and parts[ups] == "..":
        ups += 1
    return ups <= depth and ".." not in parts[ups:]


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
                _rmtree(self.root)
            except OSError:
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
            _rmtree(root)
            removed += 1
        if cgroups_gone:
            marker.unlink(missing_ok=True)
    return removed


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


@hookimpl
def tackroom_sandboxes(register) -> None:
    register.add_sandbox(LocalSandboxProvider)
