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
    starts a fresh bwrap over the same per-trial root. Files stay; ``/dev/shm`` is emptied. With
    ``keep_listening`` (run as root), every process is stopped first (SIGSTOP), those holding a listening
    socket stay stopped and every other one is SIGKILLed until none is left (:mod:`~tackroom_local.services`).
Grading
    ``run_grader`` runs the grader's command with private tmpfs copies of its folders in a mount namespace
    of its own, in a user namespace of its own (run as root) that kept services cannot ptrace or reach
    through ``/proc/PID/root``, with a clean environment; kept services run only for its duration, and the
    reward folder is copied out of the private copy (:mod:`~tackroom_local.grading`). ``set_network``
    switches between ``none``, ``public`` and ``allowlist``. Before grading, ``restore_image_tools`` puts back
    what the task's Dockerfile installed in the writable roots (recorded at start, copied beside the root) where
    the agent changed it, and removes what the agent added that would run instead (:mod:`~tackroom_local.installed`).
Network
    ``public`` shares the host's network namespace; ``none`` and ``allowlist`` keep the sandbox's own, which
    holds only ``lo``. An allowlist is an egress proxy in tackroom's process listening on one port of that
    ``lo`` (:mod:`tackroom_sandbox_kit.egress`, served by :mod:`~tackroom_local.network`), named by the proxy
    variables of every command of the phase.
Cleanup
    Each sandbox writes an owner marker (``<root>.owner.json``, beside the root, out of the agent's
    reach) holding the creating process's pid, start time and boot id, the bwrap's and the keeper's, the
    host uid and the cgroup directories. ``tackroom sandbox cleanup --sandbox local`` removes the roots
    (and ``<root>.installed``), bwraps and cgroups of every marker whose owner is gone; a live owner's
    sandboxes are never touched, and roots without a marker (made by an older tackroom) are left alone. A
    sandbox's cgroup is named ``tackroom-<creator pid>-<creator start time>-<root>``, so every sandbox start
    (and every cleanup) also removes the cgroups of dead creators, wherever their roots were.

Run as root, bwrap itself runs as the sandbox's host uid; when ``root_dir`` is not searchable by that
uid (a 0700 folder), each bwrap starts in a private mount namespace where the per-trial root is bound at
:data:`STAGE_DIR` for it. The keeper binary is copied into the per-trial root (outside the folders bound
into the sandbox).

The task's Dockerfile is honoured as far as a shared /usr allows: WORKDIR, COPY/ADD (of local files),
ENV (``$NAME`` substituted, as Docker does), ARG defaults and RUN. FROM is not: the sandbox runs on the host's
userland, and the trial result's notes say so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import re
import secrets
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Literal

from pydantic import Field

from tackroom import (
    ExecResult,
    NetworkPolicy,
    PluginOptions,
    Sandbox,
    SandboxError,
    SandboxPathError,
    SandboxProvider,
    SandboxSpec,
    SandboxTimeoutError,
    Task,
    TaskError,
)
from tackroom_local.cgroups import cgroup_parents, sweep_cgroups
from tackroom_local.dockerfile import DockerfileSteps, parse_dockerfile
from tackroom_local.grading import GraderRuns
from tackroom_local.installed import InstalledTools, installed_note
from tackroom_local.keeper import NamespaceKeeper, tool
from tackroom_local.limits import SandboxLimits
from tackroom_local.markers import (
    INSTALLED_SUFFIX,
    MARKER_SUFFIX,
    OwnerMarker,
    base_dir,
    check_private_dir,
    remove_leftovers,
    rmtree,
    unmount_disk,
)
from tackroom_local.namespaces import Namespaces
from tackroom_local.services import SETTLE_SEC, describe, keep_listening
from tackroom_local.transfers import ViewTransfers
from tackroom_local.view import DEFAULT_PATH, WRITABLE_ROOTS, build_view, inside_path
from tackroom_sandbox_kit import NamespacePorts, dist_folders, remove_added_tooling, run_process, tooling_note

HOST_UID_BASE = 1_000_000_000


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
    egress_hosts: dict[str, str] = Field(
        default_factory=dict,
        description="Names a network allowlist's proxy resolves from this table before DNS (name = IP address, like "
                    "docker's --add-host; may point at the host's own addresses, e.g. a local mirror)",
    )  # fmt: skip
    settle_sec: float = Field(
        default=SETTLE_SEC, ge=0, le=60,
        description="At the end of the agent's turn, when the task keeps its services: how long busy processes get, "
                    "at most, to settle (a server still starting opens its socket) before those not listening are killed",
    )  # fmt: skip


class LocalSandbox(Sandbox):
    """A bubblewrap sandbox; see the module docstring. Its jobs are parts it holds, sharing one public handle,
    :attr:`namespaces` (:class:`~tackroom_local.namespaces.Namespaces`): :attr:`keeper` launches and ends bwrap and
    its keeper (:mod:`~tackroom_local.keeper`), :attr:`limits` sets up its cgroup or rlimits and disk
    (:mod:`~tackroom_local.limits`), :attr:`transfers` moves files (:mod:`~tackroom_local.transfers`), :attr:`grader`
    runs the grader (:mod:`~tackroom_local.grading`), :attr:`network` serves the allowlist's proxy and forwarded host
    ports (:mod:`~tackroom_local.network`), :attr:`dockerfile` applies the task's Dockerfile
    (:mod:`~tackroom_local.dockerfile`) and :attr:`installed` records what it installed and puts that back before
    grading (:mod:`~tackroom_local.installed`). This class holds the lifecycle, ``exec`` and the order things happen
    in."""

    binds_mounts = True
    """``SandboxSpec.mounts`` are read-only binds in folders of bwrap's own root (:func:`~tackroom_local.view.add_mount`)."""


    def __init__(self, spec: SandboxSpec, options: LocalSandboxOptions) -> None:
        super().__init__(spec)
        self.options = options
        self.base = base_dir(options.root_dir)
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", spec.name)[:80]
        self.root = self.base / f"{safe}-{uuid.uuid4().hex[:8]}"
        self.env: dict[str, str] = {"PATH": DEFAULT_PATH, "HOME": "/root", "LANG": "C.UTF-8", "TERM": "xterm"}
        self.env.update(spec.env)
        self.workdir = spec.workdir
        ns = self.namespaces = Namespaces(self.root, OwnerMarker(self.base / f"{self.root.name}{MARKER_SUFFIX}"),
                                          online=bool(spec.allow_internet))
        self.keeper = NamespaceKeeper(ns)
        self.limits = SandboxLimits(ns, spec, pids_limit=options.pids_limit, mode=options.limits, notes=self.notes)
        self.transfers = ViewTransfers(ns, spec.storage_mb)
        self.network = NamespacePorts(spec.network, hosts=options.egress_hosts, notes=self.notes)
        self.grader = GraderRuns(ns, self.network, storage_mb=spec.storage_mb, output_limit=options.output_limit_bytes)
        self.dockerfile = DockerfileSteps(self, self.transfers)
        self.installed = InstalledTools(self.transfers, self.base / f"{self.root.name}{INSTALLED_SUFFIX}")
        self._lock = asyncio.Lock()
        self._dists_at_start: set[Path] = set()
        """Python distributions in the writable roots when the sandbox started (the task's; restore_image_tools)."""

    @property
    def uid(self) -> int | None:
        """The host uid of root inside (None: tackroom runs unprivileged, so it is tackroom's own)."""
        return self.namespaces.uid

    @property
    def marker(self) -> Path:
        """The owner marker, beside the root (out of the agent's reach)."""
        return self.namespaces.owner.path

    # -- lifecycle ------------------------------------------------------------------
    async def start(self) -> None:
        ns = self.namespaces
        if ns.proc is not None:
            return
        if ns.stopped:
            raise SandboxError("this sandbox was stopped; create a new one")
        try:
            ns.tools = {
                "bwrap": tool(self.options.bwrap, "bubblewrap makes the namespaces"),
                "nsenter": tool("nsenter", "every exec enters the sandbox with it"),
                "setpriv": tool("setpriv", "every exec drops its capabilities with it"),
            }
            await asyncio.to_thread(self._prepare)
            await self.keeper.launch(self.spec.start_timeout_sec)
            await self._serve_policy()
            with contextlib.suppress(SandboxPathError):
                await asyncio.to_thread(self.transfers.ensure_dir, self.workdir, self.workdir)
            if await self.dockerfile.apply():
                await asyncio.to_thread(self.installed.record, self.env.get("PATH", DEFAULT_PATH), [self.workdir])
            self._dists_at_start = await asyncio.to_thread(dist_folders, self.root)
        except BaseException:
            await self.stop()
            raise

    def _prepare(self) -> None:
        """Marker, per-trial root, limits: everything on the host before bwrap starts."""
        ns = self.namespaces
        self.base.mkdir(parents=True, exist_ok=True, mode=0o755)
        check_private_dir(self.base)
        if os.geteuid() == 0:
            ns.uid = self.options.host_uid or HOST_UID_BASE + secrets.randbelow(1 << 28)
        ns.owner.create(self.root, ns.uid)
        self.root.mkdir(mode=0o755)
        self.limits.limit_storage()
        for name in WRITABLE_ROOTS:
            d = self.root / name
            d.mkdir(mode=0o1777 if name == "tmp" else 0o755)
            d.chmod(0o1777 if name == "tmp" else 0o755)
            if ns.uid is not None:
                os.chown(d, ns.uid, ns.uid)
        mounts = {path: host.resolve() for path, host in self.spec.mounts.items()}
        self.keeper.prepare(self.base, list(mounts.values()))
        ns.view = build_view(self.root, mounts)
        ns.inside = {name: inside_path(name, ns.view) for name in ("setpriv", "env", "bash", "sh", "unshare")}
        self.limits.setup()

    async def kill_processes(self, *, timeout: float = 10.0, keep_listening: bool = False) -> list[str]:
        """End of the agent's turn (see the module docstring). ``keep_listening``: the processes holding a listening
        socket stay, frozen (:mod:`~tackroom_local.services`); one line per kept process is returned."""
        ns = self.namespaces
        ns.alive()
        if keep_listening and ns.uid is None:
            raise NotImplementedError(
                "the local sandbox keeps services into grading only when tackroom runs as root: unprivileged, the "
                "grader would share the services' uid and gid, so a service could reach the grader's private folders "
                "through /proc/PID/root"
            )
        ns.agent_done = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        await self.network.close_forwards()
        async with self._lock:
            ns.ready.clear()
            try:
                if keep_listening:
                    kept = await asyncio.to_thread(self._keep_services, deadline)
                    if kept:
                        return kept
                await self._restart(deadline)
                return []
            finally:
                ns.ready.set()

    def _keep_services(self, deadline: float) -> list[str]:
        """Keep the processes that hold a listening socket, frozen (:func:`~tackroom_local.services.keep_listening`);
        one line per kept process, [] when none holds one."""
        ns = self.namespaces
        assert ns.keeper_pid is not None
        held = keep_listening(ns.pidns, ns.keeper_pid, self.options.settle_sec, deadline, self.notes)
        ns.kept = set(held)
        return [describe(pid, held[pid]) for pid in sorted(held)]

    async def _restart(self, deadline: float) -> None:
        """End the pid namespace, confirm it is empty, start a fresh keeper (with the network of ``online``)."""
        ns = self.namespaces
        loop = asyncio.get_running_loop()
        pidns = ns.pidns
        await self.keeper.end(max(1.0, deadline - loop.time()))
        ns.kept = set()
        self.grader.network = "sandbox"
        while left := self.keeper.leftovers(pidns):  # host-side nsenter parents exit right after their children
            if loop.time() > deadline:
                raise SandboxError(f"processes survived kill_processes(): host pids {sorted(left)} are still "
                                   "alive in the sandbox")
            await asyncio.sleep(0.002)
        await self.keeper.launch(max(1.0, deadline - loop.time()))
        await self._serve_policy()  # the namespace is new: so is the proxy in it

    async def _serve_policy(self) -> None:
        """The phase's allowlist proxy in the sandbox's namespace (none for ``none`` / ``public``)."""
        ns = self.namespaces
        assert ns.keeper_pid is not None
        await self.network.serve(ns.keeper_pid, online=ns.online)

    async def set_network(self, policy: NetworkPolicy, *, timeout: float = 60.0) -> None:
        """Between the agent's phase and grading: ``policy`` from now on. With no service kept, the (empty)
        namespaces restart when it moves between the host's network and their own; with services kept, they keep
        theirs and the grader's command gets the policy's (run as root: the host's network, or an empty one). An
        allowlist is a fresh proxy in the sandbox's own namespace (connections of the agent's phase end)."""
        ns = self.namespaces
        online = policy.mode == "public"
        ns.alive()
        self.network.policy = policy
        if not ns.kept:
            if online != ns.online:
                await self.network.close_forwards()
                async with self._lock:
                    ns.ready.clear()
                    try:
                        ns.online = online
                        await self._restart(asyncio.get_running_loop().time() + timeout)
                    finally:
                        ns.ready.set()
            else:
                await self._serve_policy()
            return
        if online == ns.online:
            self.grader.network = "sandbox"
            await self._serve_policy()
            return
        await self.network.close_egress()
        if policy.mode == "allowlist":  # the services hold the host's network: no namespace of theirs to serve it in
            self.grader.network = "empty"
            self.notes.append(f"local sandbox: grading's allowlist ({policy.describe()}) could not be served while "
                              "the services kept from the agent's phase held the host's network; grading ran offline")
            return
        self.grader.network = "host" if online else "empty"
        self.notes.append(
            f"local sandbox: grading ran with {'the host' if online else 'no'} network while the services kept from "
            "the agent's phase stayed in the sandbox's own network namespace; the grader could not reach them there"
        )

    async def stop(self) -> None:
        ns = self.namespaces
        ns.stopped = True
        await asyncio.shield(self.network.close_forwards())
        await asyncio.shield(self.network.close_egress())
        proc, ns.proc = ns.proc, None
        self.keeper.kill()
        if proc is not None and proc.returncode is None:
            try:
                await asyncio.shield(asyncio.wait_for(proc.wait(), 5))
            except (TimeoutError, asyncio.CancelledError):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.shield(asyncio.wait_for(proc.wait(), 5))
        self.keeper.release()
        ns.ready.set()
        await asyncio.shield(asyncio.to_thread(self._remove_host_state))

    def _remove_host_state(self) -> None:
        """Cgroups, root, marker; the marker stays (for ``cleanup``) when something could not be removed."""
        cgroups = self.namespaces.cgroups
        gone = cgroups.remove() if cgroups is not None else True
        try:
            self.installed.discard()
        except OSError:
            gone = False
        if not self.options.keep_root:
            try:
                unmount_disk(self.root, self.limits.disk)
                rmtree(self.root)
            except (OSError, subprocess.SubprocessError):
                gone = False
        if gone:
            self.namespaces.owner.remove()

    # -- commands -------------------------------------------------------------------
    async def exec(self, cmd, *, cwd=None, env=None, timeout=600.0, stdin=None) -> ExecResult:
        ns = self.namespaces
        await ns.wait_ready(timeout)
        ns.alive()
        merged = {**self.env, **self.network.env, **(env or {})}
        # setpriv runs with every capability of the sandbox's user namespace until it drops them: by its
        # absolute path in read-only /usr and with an empty environment (no LD_* from the task's env).
        inside = ns.inside
        argv = ns.prefix + [
            ns.tools["nsenter"], "-t", str(ns.keeper_pid), "-U", "-m", "-u", "-i", "-n", "-p", "-C", "-r", "-w", "--",
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
        ns.alive()
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

    async def upload(self, source: Path, dest: str, *, timeout: float = 120.0) -> None:
        await self.transfers.upload(source, dest, workdir=self.workdir, timeout=timeout)

    async def download(self, source: str, dest: Path, *, timeout: float = 120.0) -> None:
        await self.transfers.download(source, dest, workdir=self.workdir, timeout=timeout)

    async def run_grader(self, cmd: list[str] | str, *, private: list[str], collect: str, dest: Path,
                         cwd: str | None = None, env: dict[str, str] | None = None,
                         timeout: float = 600.0, graded: list[str] | tuple[str, ...] = ()) -> ExecResult:
        """Run the grader's command with private copies of ``private``; copy ``collect``'s to ``dest``
        (:mod:`~tackroom_local.grading`). While services are kept, ``graded`` is read from a copy taken while they
        were frozen."""
        return await self.grader.run(cmd, private=private, collect=collect, dest=dest, workdir=self.workdir,
                                     sandbox_env=self.env, cwd=cwd, env=env, timeout=timeout, graded=graded)

    async def restore_image_tools(self, keep: list[str] | None = None) -> list[str]:
        """Before grading: the host's tools and those the task's environment installed are the ones that run.

        ``/usr`` is the host's, read-only, and ``/`` a read-only tmpfs, so the agent can change no executable or
        library there and add nothing to them (tests/security/test_grading_attacks.py checks it); the start-up hooks
        interpreters read from system folders are the host's, and ``run_grader`` starts the grader without the ones
        in HOME or the environment. First the test tooling the agent installed in the writable roots is uninstalled
        (a fake ``pytest`` in the virtualenv folder test.sh is about to create;
        :func:`tackroom_sandbox_kit.remove_added_tooling`), whatever ``keep`` says, since test tooling is never a
        task's answer. Then what the task's Dockerfile installed in the writable roots (a virtualenv under ``/opt``, a
        script, a tool on the task's ``PATH``), recorded at start, is made what it was
        (:mod:`~tackroom_local.installed`): each file of it the agent changed, replaced or deleted is put back, and
        what the agent added that would run instead is removed (a same-named file earlier on the task's ``PATH``,
        which test.sh's commands resolve through; a ``.pth`` or ``sitecustomize`` in a site folder; a module beside
        a recorded one or a recorded script). Paths under ``keep`` (the working directory, ``grading_paths``) stay as
        the agent made them. The notes name what was put back and removed."""
        self.namespaces.alive()
        removed = await asyncio.to_thread(remove_added_tooling, self.root, self._dists_at_start)
        shown = ["/" + str(p.relative_to(self.root)) for p in removed]
        if note := tooling_note(shown):
            self.notes.append(note)
        path = self.env.get("PATH", DEFAULT_PATH)
        if self.installed.idle(path):
            return shown
        kept = [posixpath.normpath(posixpath.join(self.workdir, k)) for k in [self.workdir, *(keep or [])]]
        put_back, dropped = await asyncio.to_thread(self.installed.restore, path, kept)
        if note := installed_note(put_back, dropped):
            self.notes.append(note)
        return shown + put_back + dropped

    async def forward_host_port(self, port: int) -> str:
        ns = self.namespaces
        if ns.online:
            return f"http://127.0.0.1:{port}"  # the sandbox shares the host's network
        await ns.wait_ready(30)
        ns.alive()
        assert ns.keeper_pid is not None
        return await self.network.forward(ns.keeper_pid, port)

    async def expose(self, port: int) -> str:
        if not self.namespaces.online:
            raise SandboxError(
                "the local sandbox shares no network with the host unless the task allows it "
                "([environment] allow_internet = true); talk to servers inside it through exec (stdio) instead"
            )
        return f"http://127.0.0.1:{port}"


def _quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


class LocalSandboxProvider(SandboxProvider):
    """Per-trial root under bubblewrap with the host's /usr read-only; no network by default."""

    name = "local"
    Options = LocalSandboxOptions
    capabilities = frozenset({"persistent_processes", "network", "network_allowlist"})

    def create(self, spec: SandboxSpec) -> LocalSandbox:
        return LocalSandbox(spec, self.options)

    def refuses(self, task: Task) -> str | None:
        """A Dockerfile this sandbox cannot read (its instructions are carried out at start, FROM aside:
        :mod:`tackroom_local.dockerfile`), named before the run instead of as a failed start."""
        if task.dockerfile is None:
            return None
        try:
            parse_dockerfile(task.dockerfile)
        except TaskError as exc:
            return f"the 'local' sandbox cannot read the task's Dockerfile: {exc}"
        return None

    def _base(self) -> Path:
        return base_dir(self.options.root_dir)

    async def cleanup(self) -> int:
        """Remove the roots, bwraps and cgroups of sandboxes whose creating process is gone (never a live run's).

        Returns how many roots went; cgroups whose creator is gone are removed too, wherever their root was.
        """

        def run() -> int:
            removed = remove_leftovers(self._base())
            with contextlib.suppress(OSError):
                sweep_cgroups(cgroup_parents())
            return removed

        return await asyncio.to_thread(run)

