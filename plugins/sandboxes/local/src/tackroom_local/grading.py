"""The grader's command in the local sandbox (``run_grader``): private copies of the grader's folders, a
clean start, kept services resumed only while it runs, and the reward folder copied out from its private copy.

The command enters the sandbox's namespaces like ``exec``, then:

1. ``unshare -m``: a mount namespace of its own. Run as root, nsenter does not enter the sandbox's user
   namespace, so this one is owned by the host's and nothing in it can be unmounted by what runs later;
   unprivileged it is owned by the sandbox's user namespace.
2. A tmpfs at :data:`GRADER_DIR` (an empty folder of bwrap's read-only root) holds a fresh HOME and a copy
   of each ``private`` folder, made with the grader's own rights (what a root without capabilities cannot
   read, e.g. a folder the agent made unreadable, is not copied), then bound over the folder. No other
   process of the sandbox sees these mounts.
3. Kept services are resumed (tackroom sends SIGCONT once the private view exists).
4. The command runs as the sandbox's root but, run as root, in a user namespace of its own (a sibling of
   the sandbox's) whose group is a fresh host gid: the kernel refuses ptrace-mode access from another user
   namespace without ``CAP_SYS_PTRACE`` there, and the gids differ, so the services (same host uid) can
   neither ptrace it nor open its ``/proc/PID/root``, ``cwd`` or ``fd``: they cannot reach its private
   folders. Every capability is dropped; the environment is ``env -i`` with a fresh HOME,
   ``PYTHONNOUSERSITE=1`` and none of the interpreters' start-up variables; bash starts with
   ``--noprofile --norc``.
5. When it ends, tackroom freezes every process of the sandbox again and copies the private copy of
   ``collect`` to ``dest`` through ``/proc/PID/root`` of the set-up shell (regular files and folders,
   never following a link); the sandbox's own ``collect`` folder is never read.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import os
import shlex
import socket
import time
from pathlib import Path
from typing import Literal

from tackroom import ExecResult, GradingSabotagedError, SandboxError, SandboxExhaustedError, SandboxTimeoutError
from tackroom.grading import GRADER_CLEAN_ENV, GRADER_SCRUBBED_ENV
from tackroom_local.namespaces import Namespaces
from tackroom_local.services import freeze, kill_all_but, resume
from tackroom_local.transfers import sandbox_parts
from tackroom_local.view import DEFAULT_PATH, ETC_FILES, GRADER_DIR, Deadline, Walk
from tackroom_sandbox_kit import (
    PIP_CONFIG_FILES,
    UV_CONFIG_FILES,
    NamespacePorts,
    drain_capped,
    install_env,
    kill_group,
    spawn_in_group,
)

UNSAFE_ENV = frozenset({*GRADER_SCRUBBED_ENV, "PYTHONINSPECT", "PERL5DB", "GCONV_PATH", "PROMPT_COMMAND", "HOME"})
"""Variables that make an interpreter or the loader run code from a path (core's list and a few more): only
the grader's own ``env`` may set them; HOME is the grader's fresh one."""

SETUP = r"""
set -u
uid=$1; gid=$2; m=$3; shift 3
G=@GRADER_DIR@
@NET_UP@
mount -t tmpfs -o mode=0755,nosuid,nodev tackroom-grader "$G" || exit 120
mkdir -m 0700 "$G/home" && chown "$uid:$gid" "$G/home" || exit 120
# the image's /etc/skel (read-only, not the agent's): a login shell a test starts reads .profile -> ~/.bashrc
@AS_GRADER@ cp -a /etc/skel/. "$G/home/" 2>/dev/null
# what the grader reads while kept services run: a copy taken while they are frozen, bound over the real
# folder or file (resolved as the sandbox sees it), so what they write there meanwhile is never graded
j=0
while [ "$j" -lt "$m" ]; do
    p=$1; shift; j=$((j + 1))
    r=$(readlink -f -- "$p") || continue
    case $r in /|"$G"|"$G"/*) continue ;; esac
    if [ -d "$r" ]; then
        mkdir -m 0755 "$G/s$j" && chown "$uid:$gid" "$G/s$j" || exit 120
        @AS_GRADER@ cp -a -- "$r/." "$G/s$j/" 2>/dev/null
    elif [ -f "$r" ]; then
        @AS_GRADER@ cp -a -- "$r" "$G/s$j" 2>/dev/null || continue
    else
        continue
    fi
    mount --bind "$G/s$j" "$r" || exit 120
done
n=$1; shift
i=0
while [ "$i" -lt "$n" ]; do
    p=$1; shift
    if [ ! -e "$p" ] && [ ! -L "$p" ] && ! @AS_GRADER@ mkdir -p -- "$p" 2>/dev/null; then
        echo "tackroom: $p is missing and cannot be created" >&2; exit 123
    fi
    if [ -L "$p" ] || [ ! -d "$p" ] || [ "$(readlink -f -- "$p")" != "$p" ]; then
        echo "tackroom: $p is not a plain folder (a link on its path?)" >&2; exit 121
    fi
    mkdir -m 0755 "$G/$i" && chown "$uid:$gid" "$G/$i" || exit 120
    @AS_GRADER@ cp -a -- "$p/." "$G/$i/" 2>/dev/null
    chmod -R u+rwX "$G/$i"  # the grader owns its copy and, without capabilities, must be able to write it
    mount --bind "$G/$i" "$p" || exit 120
    i=$((i + 1))
done
shift
echo ready >&0; read -r _ || exit 122
"$@" </dev/null
rc=$?
echo "done $rc" >&0; read -r _
exit "$rc"
"""
"""Run as the sandbox's set-up root in the grader's mount namespace. Args: uid gid n, the n private folders,
``--``, the grader's command. Talks to tackroom over the control socket on its stdin."""


def clean_env(base: dict[str, str], env: dict[str, str] | None) -> dict[str, str]:
    """The grader's environment: the sandbox's without what makes interpreters load code, then ``env``."""
    out = {k: v for k, v in base.items() if k not in UNSAFE_ENV and not k.startswith(("LD_", "DYLD_"))}
    out.update({"PATH": out.get("PATH", DEFAULT_PATH), "HOME": f"{GRADER_DIR}/home", **GRADER_CLEAN_ENV})
    # package managers read only the configuration the host's read-only /etc gives the sandbox (install_config)
    uv = next((f for f in reversed(UV_CONFIG_FILES) if _bound_etc_file(f)), None)
    out.update(install_env(out, pip_configs=[Path(f).read_text(errors="replace") for f in PIP_CONFIG_FILES
                                             if _bound_etc_file(f)], uv_config=uv))
    out.update(env or {})
    return out


def _bound_etc_file(path: str) -> bool:
    """Whether the host file ``path`` (under /etc) is one the sandbox sees, read-only, through :data:`ETC_FILES`."""
    rel = path.removeprefix("/etc/")
    return os.path.isfile(path) and any(fnmatch.fnmatchcase(rel, pat) or rel.startswith(pat.rstrip("/") + "/")
                                        for pat in ETC_FILES)


def _plain(path: str, workdir: str) -> str:
    """``path`` as an absolute sandbox path without ``.`` or doubled slashes (``/`` is refused)."""
    parts = sandbox_parts(path, workdir)
    if not parts:
        raise ValueError("/ cannot be a private folder of the grader")
    return "/" + "/".join(parts)


class _Control:
    """tackroom's end of the control socket: one line at a time."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf = sock, b""

    async def line(self) -> str:
        loop = asyncio.get_running_loop()
        while b"\n" not in self.buf:
            chunk = await loop.sock_recv(self.sock, 256)
            if not chunk:
                return ""
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode(errors="replace")

    async def send(self, text: str) -> None:
        with contextlib.suppress(OSError):
            await asyncio.get_running_loop().sock_sendall(self.sock, text.encode())


class GraderRuns:
    """``run_grader`` for :class:`~tackroom_local.sandbox.LocalSandbox`, over the shared :class:`Namespaces`; the
    sandbox's ``set_network`` says, through :attr:`network`, which network the grader's command gets, and ``ports``
    which proxy variables (an allowlist's)."""

    def __init__(self, ns: Namespaces, ports: NamespacePorts, *, storage_mb: int | None, output_limit: int) -> None:
        self.ns, self.ports, self.storage_mb, self.output_limit = ns, ports, storage_mb, output_limit
        self.network: Literal["sandbox", "host", "empty"] = "sandbox"
        """The grader's network while services are kept: the sandbox's, the host's, or an empty one."""

    def _grader_argv(self, cmd: list[str] | str, private: list[str], cwd: str, env: dict[str, str],
                     grader_gid: int | None, graded: list[str] | None = None) -> list[str]:
        ns = self.ns
        inside = ns.inside
        root = ns.uid is not None
        nsflags = ["-m", "-u", "-i", "-p", "-C", "-r", "-w"]
        unshare = [inside["unshare"], "--mount", "--propagation", "private"]
        net = self.network
        if net == "sandbox":
            nsflags.append("-n")
        elif net == "empty":
            nsflags.append("-n")
            unshare.append("--net")
        # net == "host": run as root, nsenter stays in the host's network namespace
        drop = [inside["setpriv"], "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
        if root:
            uid, gid = str(ns.uid), str(grader_gid)
            as_grader = [inside["setpriv"], f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *drop[1:]]
            enter = [ns.tools["nsenter"], "-t", str(ns.keeper_pid), *nsflags, "--"]
            # a user namespace of the grader's own: the sandbox's uid, a group the services do not have
            become = [inside["setpriv"], f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--",
                      inside["unshare"], "--user", "--map-root-user", "--", *drop]  # fmt: skip
        else:
            uid = gid = "0"
            as_grader = drop
            enter = [ns.tools["nsenter"], "-t", str(ns.keeper_pid), "-U", *nsflags, "--"]
            become = drop
        script = cmd if isinstance(cmd, str) else " ".join(shlex.quote(c) for c in cmd)
        setup = (SETUP.replace("@GRADER_DIR@", GRADER_DIR)
                 .replace("@NET_UP@", "ip link set lo up 2>/dev/null" if net == "empty" else ":")
                 .replace("@AS_GRADER@", " ".join(shlex.quote(a) for a in as_grader)))  # fmt: skip
        return [
            *ns.prefix, *enter, *unshare, "--", inside["env"], "-i", f"PATH={DEFAULT_PATH}",
            inside["sh"], "-c", setup, "tackroom-grader", uid, gid, str(len(graded or [])), *(graded or []),
            str(len(private)),
            *private, "--",
            *become, inside["env"], "-i", *[f"{k}={v}" for k, v in env.items()],
            inside["bash"], "--noprofile", "--norc", "-c", f"cd {shlex.quote(cwd)} || exit 1\n{script}",
        ]  # fmt: skip

    async def run(self, cmd: list[str] | str, *, private: list[str], collect: str, dest: Path, workdir: str,
                  sandbox_env: dict[str, str], cwd: str | None = None, env: dict[str, str] | None = None,
                  timeout: float = 600.0, graded: list[str] | tuple[str, ...] = ()) -> ExecResult:
        """Run the grader's command with private copies of ``private``; copy ``collect``'s to ``dest`` (see the module
        docstring). Relative paths and the command start at ``workdir`` (the command at ``cwd`` when given); its
        environment is ``sandbox_env`` and the phase's proxy variables made clean (:func:`clean_env`), then ``env``.
        While services are kept, ``graded`` is read from a copy taken while they were frozen (:data:`SETUP`)."""
        ns = self.ns
        private = [_plain(p, workdir) for p in private]
        collect = _plain(collect, workdir)
        if collect not in private:
            raise ValueError(f"collect={collect!r} must be one of private={private}")
        await ns.wait_ready(timeout)
        ns.alive()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        grader_gid = self._grader_gid()
        mine, theirs = socket.socketpair()
        mine.setblocking(False)
        base_env = {**sandbox_env, **self.ports.env}  # an allowlist's proxy variables (tackroom_sandbox_kit.egress)
        argv = self._grader_argv(cmd, private, cwd or workdir, clean_env(base_env, env), grader_gid,
                                 [_plain(p, workdir) for p in graded if sandbox_parts(p, workdir)] if ns.kept else [])
        started = time.monotonic()
        try:
            proc = await spawn_in_group(argv, stdin=theirs.fileno(), stdout=asyncio.subprocess.PIPE,
                                        stderr=asyncio.subprocess.PIPE, env={})
        finally:
            theirs.close()
        out, err = bytearray(), bytearray()
        limit = self.output_limit
        assert proc.stdout is not None and proc.stderr is not None
        drains = [asyncio.ensure_future(drain_capped(proc.stdout, limit, out)),
                  asyncio.ensure_future(drain_capped(proc.stderr, limit, err))]  # fmt: skip
        ctl = _Control(mine)
        setup_pid: int | None = None
        try:
            async with asyncio.timeout_at(deadline):
                said = await ctl.line()
                if said == "ready":
                    setup_pid = self._setup_pid(proc.pid)
                    resume(ns.kept)
                    await ctl.send("go\n")
                    said = await ctl.line()
                if not said.startswith("done "):
                    code = await proc.wait()
                    await asyncio.gather(*drains)
                    why = err.decode(errors="replace").strip()[-500:]
                    if code == 121:
                        raise GradingSabotagedError(f"the grader's private folders could not be made: {why}; graded 0")
                    if code == 123 and self.storage_mb is not None:
                        raise SandboxExhaustedError(f"{why}: the agent filled the sandbox's disk (storage_mb = "
                                                    f"{self.storage_mb}); graded 0")
                    if code == 123:
                        raise GradingSabotagedError(f"{why}; graded 0")
                    if (full := self._pids_full()) is not None:
                        raise SandboxExhaustedError(f"the processes kept from the agent's turn hold every pid the sandbox "
                                                    f"allows ({full}), so the grader could not start; graded 0")
                    raise SandboxError(f"the grader's command could not be set up (exit {code}): {why}")
                exit_code = int(said.split()[1])
                await asyncio.to_thread(self._refreeze, setup_pid, deadline)
                await asyncio.to_thread(self._collect, setup_pid, private.index(collect), Path(dest), deadline)
                await ctl.send("end\n")
                await proc.wait()
                truncated = any(await asyncio.gather(*drains))
        except TimeoutError:
            await asyncio.to_thread(self._end_grader, setup_pid, loop.time() + 10)
            kill_group(proc)
            raise SandboxTimeoutError(f"the grader's command timed out after {timeout}s: {str(cmd)[:200]}") from None
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self._end_grader, setup_pid, time.monotonic() + 10)
            kill_group(proc)
            raise
        finally:
            mine.close()
            for d in drains:
                d.cancel()
        ns.alive()
        return ExecResult(exit_code=exit_code, stdout=out.decode(errors="replace"), stderr=err.decode(errors="replace"),
                          truncated=truncated, duration_s=time.monotonic() - started)  # fmt: skip

    def _pids_full(self) -> str | None:
        """``"512 of 512"`` when the sandbox's pid cgroup is (nearly) full, else None."""
        for d in self.ns.cgroups.dirs if self.ns.cgroups is not None else []:
            with contextlib.suppress(OSError, ValueError):
                most = (d / "pids.max").read_text().strip()
                now = int((d / "pids.current").read_text())
                if most != "max" and now >= int(most) - 2:
                    return f"{now} of {most}"
        return None

    def _grader_gid(self) -> int | None:
        """A host gid no process of the sandbox has (run as root); the grader's group."""
        uid = self.ns.uid
        if uid is None:
            return None
        return uid + 1 if uid + 1 < 2**31 - 1 else uid - 1

    @staticmethod
    def _setup_pid(nsenter: int) -> int | None:
        """The host pid of the set-up shell: nsenter's one child (it forked into the pid namespace)."""
        with contextlib.suppress(OSError, ValueError):
            kids = Path(f"/proc/{nsenter}/task/{nsenter}/children").read_text().split()
            return int(kids[0]) if kids else None
        return None

    def _refreeze(self, setup_pid: int | None, deadline: float) -> None:
        """Stop every process of the sandbox but its keeper and the set-up shell (the grader's leftovers too)."""
        skip = {self.ns.keeper_pid} | ({setup_pid} if setup_pid else set())
        try:
            freeze(self.ns.pidns, skip, min(deadline, time.monotonic() + 10))
        except TimeoutError as exc:
            raise SandboxError(f"the sandbox's processes could not be frozen after grading: {exc}") from None

    def _end_grader(self, setup_pid: int | None, deadline: float) -> None:
        """After a failed or timed-out grader: the kept services frozen, everything else killed."""
        skip = {self.ns.keeper_pid}
        with contextlib.suppress(TimeoutError):
            freeze(self.ns.pidns, skip, deadline)
        with contextlib.suppress(TimeoutError):
            kill_all_but(self.ns.pidns, skip | self.ns.kept, deadline)

    def _collect(self, setup_pid: int | None, index: int, dest: Path, deadline: float) -> None:
        """Copy the private copy of ``collect`` (seen through the set-up shell's root) to ``dest`` on the host."""
        if setup_pid is None:
            raise SandboxError("the grader's set-up shell is gone; its reward folder cannot be read")
        dest = Path(os.path.abspath(dest))
        dest.mkdir(parents=True, exist_ok=True)
        src = os.open(f"/proc/{setup_pid}/root{GRADER_DIR}/{index}", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            host = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            assert self.ns.view is not None
            walk = Walk(self.ns.view, str(dest), deadline, None)
            try:
                walk.get_tree(src, host, 0, links=False)
            except Deadline:
                raise SandboxTimeoutError("copying the grader's reward folder ran past its deadline") from None
            finally:
                os.close(host)
                walk.close()
        finally:
            os.close(src)
