"""Launching the local sandbox: bwrap and its keeper (PID 1 of the sandbox's pid namespace), and ending them.

One long-lived ``bwrap`` per sandbox holds the namespaces; its keeper is an execute-only copy of bash that
ignores signals, never forks and waits on a socket whose other end tackroom holds. Killing the keeper kills
every process of the pid namespace; :meth:`NamespaceKeeper._leftovers` confirms none survived. The
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
from tackroom_local.markers import write_json
from tackroom_local.view import DEFAULT_PATH, GRADER_DIR, INSTALL_HINT, mount_args

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
    """The launch half of :class:`~tackroom_local.sandbox.LocalSandbox`: starts bwrap and its keeper over the
    per-trial root, signals and releases the keeper, lists the processes that outlived it."""

    def _isolation_flags(self) -> list[str]:
        """bwrap's namespaces and privileges: its own user namespace (with no further ones), no capabilities."""
        flags = [
            "--unshare-all", "--unshare-user", "--disable-userns", "--uid", "0", "--gid", "0", "--die-with-parent",
            "--new-session", "--clearenv", "--hostname", "sandbox", "--cap-drop", "ALL", "--as-pid-1",
        ]  # fmt: skip
        if self._online:
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
        argv += ["--proc", "/proc", "--dev", "/dev", *mount_args(self._view, remap)]
        argv += ["--ro-bind", keeper, KEEPER_PATH, "--dir", GRADER_DIR, "--remount-ro", "/"]
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
                info = await asyncio.wait_for(read_info(info_r), timeout)
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
            if not self._online:
                open_low_ports(self._child_pid)
        if self._stopped:  # stop() ran while this keeper was starting (kill_processes racing a teardown)
            await self._end_namespace(10)
            raise SandboxError("the sandbox was stopped while kill_processes() restarted it")
        if self._marker_data is not None:
            self._marker_data["bwrap"] = [self._proc.pid, start_time(self._proc.pid)]
            self._marker_data["keeper"] = [self._child_pid, start_time(self._child_pid)]
            await asyncio.to_thread(write_json, self.marker, self._marker_data)

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
