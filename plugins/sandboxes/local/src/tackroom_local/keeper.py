"""Launching the local sandbox: bwrap and its keeper (PID 1 of the sandbox's pid namespace), and ending them.

One long-lived ``bwrap`` per sandbox holds the namespaces; its keeper is an execute-only copy of bash that
ignores signals, never forks and waits on a socket whose other end tackroom holds. Killing the keeper kills
every process of the pid namespace; :meth:`NamespaceKeeper.leftovers` confirms none survived. The
module docstring of :mod:`tackroom_local.sandbox` says what each flag enforces.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import tempfile
import threading
from pathlib import Path

from tackroom import SandboxError, SandboxTimeoutError
from tackroom_local.cgroups import start_time
from tackroom_local.markers import check_private_dir
from tackroom_local.namespaces import Namespaces
from tackroom_local.view import DEFAULT_PATH, GRADER_DIR, INSTALL_HINT, mount_args, searchable_by_all

KEEPER_PATH = "/.tackroom-keeper"
KEEPER_SCRIPT = (
    'trap "" HUP INT QUIT TERM USR1 USR2 PIPE ALRM TSTP TTIN TTOU; exec {info}>&-; echo ready >&{sock}; '
    "while read -r -u {sock} _ || [ $? -gt 128 ]; do :; done"
)
"""PID 1: signals ignored, no forks; it reaps orphans (bash's SIGCHLD handler) until tackroom's end of
the socket closes."""
STAGE_DIR = Path("/tmp/.tackroom-local-stage")
STAGE_SCRIPT = 'set -e; while [ "$1" != -- ]; do mount --bind "$2" "$1"; shift 2; done; shift; exec "$@"'
"""Run as root in a private mount namespace when root_dir (or a mount's host folder) is not searchable by the
sandbox's uid: the per-trial root appears at :data:`STAGE_DIR` and each mount's folder at ``STAGE_DIR/.mounts/N``
(for that bwrap only), where the sandbox's uid can reach them."""


def tool(name: str, why: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise SandboxError(f"{name!r} is not installed; the local sandbox needs it ({why}). {INSTALL_HINT}")
    return found




def copy_keeper(root: Path) -> Path:
    """An execute-only copy of bash in the per-trial root, outside every folder bound into the sandbox
    (a process running a binary it cannot read is not dumpable, so the agent cannot ptrace its PID 1)."""
    path = root / ".keeper"
    shutil.copyfile(os.path.realpath(shutil.which("bash") or "/bin/bash"), path)
    os.chmod(path, 0o111)
    return path



def open_low_ports(pid: int) -> None:
    """Let the sandbox's own network namespace bind ports below 1024 without a capability (a server a task's
    solution starts on port 80, as it would as root in a container). Run as root, from a thread of its own:
    ``setns`` moves only the calling thread, and a thread of the pool would stay in that namespace."""

    def run() -> None:
        with contextlib.suppress(OSError):
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.setns(fd, os.CLONE_NEWNET)
            finally:
                os.close(fd)
            Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").write_text("0")

    thread = threading.Thread(target=run, name="tackroom-local-ports")
    thread.start()
    thread.join()


async def read_info(fd: int) -> str:
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


class NamespaceKeeper:
    """Starts bwrap and its keeper over the per-trial root, signals and releases the keeper, and lists the processes
    that outlived it. What others need of the running namespaces it writes to the shared :class:`Namespaces`
    (``proc``, ``keeper_pid``, ``pidns``)."""

    def __init__(self, ns: Namespaces) -> None:
        self.ns = ns
        self.binary: Path | None = None
        """The execute-only copy of bash the keeper runs (:func:`copy_keeper`)."""
        self.stage: Path | None = None
        """Where the per-trial root appears for bwrap when the sandbox's uid cannot pass through ``root_dir`` or a
        mount's host folder (:data:`STAGE_DIR`), else None."""
        self.staged_mounts: dict[str, str] = {}
        """Each mount's host folder and where it appears for bwrap when staged."""
        self._pidfd: int | None = None
        self._sock: socket.socket | None = None

    def prepare(self, base: Path, mounts: list[Path]) -> None:
        """Copy the keeper into the per-trial root; stage the root and the mounts' host folders when bwrap's uid
        cannot reach the root under ``base`` or one of ``mounts``."""
        ns = self.ns
        self.binary = copy_keeper(ns.root)
        if ns.uid is not None and not all(searchable_by_all(p) for p in (base, *mounts)):
            if not searchable_by_all(STAGE_DIR.parent):
                raise SandboxError(f"{base} (or a mount's host folder) is not searchable by the sandbox's uid {ns.uid} "
                                   f"and neither is {STAGE_DIR.parent}; set [sandbox] root_dir to a folder every uid "
                                   "can pass through")
            STAGE_DIR.mkdir(mode=0o755, exist_ok=True)
            check_private_dir(STAGE_DIR)
            self.stage = STAGE_DIR
            ns.tools["unshare"] = tool("unshare", "it stages a root_dir the sandbox's uid cannot pass through")
            for i, host in enumerate(mounts):  # mount points in the root, outside every folder bound into the sandbox
                (ns.root / ".mounts" / str(i)).mkdir(mode=0o755, parents=True)
                self.staged_mounts[str(host)] = f"{STAGE_DIR}/.mounts/{i}"

    def isolation_flags(self) -> list[str]:
        """bwrap's namespaces and privileges: its own user namespace (with no further ones), no capabilities."""
        flags = [
            "--unshare-all", "--unshare-user", "--disable-userns", "--uid", "0", "--gid", "0", "--die-with-parent",
            "--new-session", "--clearenv", "--hostname", "sandbox", "--cap-drop", "ALL", "--as-pid-1",
        ]  # fmt: skip
        if self.ns.online:
            flags.append("--share-net")
        return flags

    def _argv(self, info_w: int, sock: int) -> list[str]:
        """bwrap's command line: staged (when needed), as the sandbox's uid (run as root), over the view."""
        ns = self.ns
        assert ns.view is not None and self.binary is not None
        argv = list(ns.prefix)
        remap: dict[str, str] = {}
        keeper = str(self.binary)
        if self.stage is not None:
            binds = [str(self.stage), str(ns.root)]
            for host, staged in self.staged_mounts.items():
                binds += [staged, host]
            argv += [ns.tools["unshare"], "--mount", "--propagation", "private", "--", "/bin/sh", "-c", STAGE_SCRIPT,
                     "sh", *binds, "--"]  # fmt: skip
            remap = {str(ns.root): str(self.stage), **self.staged_mounts}
            keeper = str(self.stage / self.binary.name)
        if ns.uid is not None:
            argv += [ns.tools["setpriv"], f"--reuid={ns.uid}", f"--regid={ns.uid}", "--clear-groups", "--"]
        argv += [ns.tools["bwrap"], *self.isolation_flags()]
        argv += ["--proc", "/proc", "--dev", "/dev", *mount_args(ns.view, remap)]
        argv += ["--ro-bind", keeper, KEEPER_PATH, "--dir", GRADER_DIR, "--remount-ro", "/"]
        argv += ["--setenv", "PATH", DEFAULT_PATH, "--chdir", "/", "--info-fd", str(info_w)]
        argv += [KEEPER_PATH, "-c", KEEPER_SCRIPT.format(info=info_w, sock=sock)]
        return argv

    async def launch(self, timeout: float) -> None:
        """Start bwrap and its keeper over the per-trial root; return once the keeper answers."""
        ns = self.ns
        mine, theirs = socket.socketpair()
        info_r, info_w = os.pipe()
        sock = theirs.fileno()
        errors = tempfile.TemporaryFile()
        try:
            proc = ns.proc = await asyncio.create_subprocess_exec(
                *self._argv(info_w, sock), pass_fds=(sock, info_w), stdin=asyncio.subprocess.DEVNULL,
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
                info = await asyncio.wait_for(read_info(info_r), timeout)
                ready = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(mine, 16), timeout) if info else b""
            except TimeoutError as exc:
                raise SandboxTimeoutError(f"bwrap did not start within {timeout}s") from exc
            if not info.strip() or ready != b"ready\n":
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), 5)
                errors.seek(0)
                why = errors.read().decode(errors="replace").strip() or f"exit {proc.returncode}"
                if ns.uid is not None and ("namespace" in why or "Operation not permitted" in why):
                    why += (f" (bwrap runs as the unprivileged uid {ns.uid}: the host must allow unprivileged user "
                            "namespaces, e.g. sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0, "
                            "kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap)")
                raise SandboxError(f"bwrap failed to start: {why}")
        except BaseException:
            mine.close()
            raise
        finally:
            errors.close()
        self._sock = mine
        await self._started(proc, json.loads(info))

    async def _started(self, proc: asyncio.subprocess.Process, info: dict) -> None:
        """bwrap answered: note its keeper, shield both from the OOM killer (run as root), record them."""
        ns = self.ns
        keeper = ns.keeper_pid = int(info["child-pid"])
        ns.pidns = info.get("pid-namespace")
        try:
            self._pidfd = os.pidfd_open(keeper)
        except (AttributeError, OSError):
            self._pidfd = None
        if os.geteuid() == 0:
            for pid in (proc.pid, keeper):
                with contextlib.suppress(OSError):
                    Path(f"/proc/{pid}/oom_score_adj").write_text("-1000")
            if not ns.online:
                open_low_ports(keeper)
        if ns.stopped:  # stop() ran while this keeper was starting (kill_processes racing a teardown)
            await self.end(10)
            raise SandboxError("the sandbox was stopped while kill_processes() restarted it")
        await asyncio.to_thread(ns.owner.record, bwrap=[proc.pid, start_time(proc.pid)],
                                keeper=[keeper, start_time(keeper)])

    async def end(self, timeout: float) -> None:
        """SIGKILL the keeper; the kernel kills the rest of the pid namespace, bwrap exits once all are reaped."""
        proc = self.ns.proc
        self.kill()
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
        self.release()

    def kill(self) -> None:
        """SIGKILL the keeper (through its pidfd where there is one, so never a recycled pid)."""
        ns = self.ns
        try:
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            elif ns.keeper_pid is not None and ns.proc is not None and ns.proc.returncode is None:
                os.kill(ns.keeper_pid, signal.SIGKILL)
        except (ProcessLookupError, OSError):
            pass

    def release(self) -> None:
        """Close tackroom's handles on the keeper (its pidfd and its end of the socket)."""
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self._pidfd = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def leftovers(self, pidns: int | None) -> set[int]:
        """Processes of this sandbox still alive: its cgroups' members, else those in its old pid namespace."""
        if self.ns.cgroups is not None:
            return self.ns.cgroups.pids()
        left: set[int] = set()
        if pidns is None:
            return left
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{entry.name}/ns/pid") == f"pid:[{pidns}]":
                        left.add(int(entry.name))
        return left
