"""The running local sandbox as its parts see it: one handle, :class:`Namespaces`, that the keeper, the limits, the
transfers and the grader share instead of reaching into each other.

:class:`~tackroom_local.sandbox.LocalSandbox` makes one per sandbox and gives it to each part it holds. Who writes
what is said on each attribute; everything else only reads it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from tackroom import SandboxError, SandboxTimeoutError
from tackroom_local.cgroups import Cgroups
from tackroom_local.markers import OwnerMarker
from tackroom_local.view import Dir


@dataclass(eq=False)
class Namespaces:
    """One local sandbox's per-trial root, the bwrap that holds its namespaces and what enters them."""

    root: Path
    """The per-trial root on the host (its writable folders are bound into the sandbox)."""
    owner: OwnerMarker
    """The owner marker beside the root; each part records there what it made."""
    online: bool = False
    """Whether the namespaces share the host's network (the sandbox sets it; the keeper reads it at launch)."""
    uid: int | None = None
    """The host uid of root inside (None: tackroom runs unprivileged, so it is tackroom's own); set at start."""
    view: Dir | None = None
    """What the sandbox sees at ``/`` (:func:`~tackroom_local.view.build_view`); set at start."""
    tools: dict[str, str] = field(default_factory=dict)
    """Host programs by name (bwrap, nsenter, setpriv, and unshare or prlimit where needed), found at start."""
    inside: dict[str, str] = field(default_factory=dict)
    """Programs run inside by absolute path in read-only /usr (setpriv, env, bash, sh, unshare)."""
    prefix: list[str] = field(default_factory=list)
    """What every process of the sandbox starts under: joining its cgroups, or its rlimits (set by the limits)."""
    cgroups: Cgroups | None = None
    """The sandbox's cgroups, when it has a writable one (set by the limits)."""
    proc: asyncio.subprocess.Process | None = None
    """The running bwrap (set by the keeper; None before start and after stop)."""
    keeper_pid: int | None = None
    """Host pid of the keeper, PID 1 of the pid namespace: what ``nsenter -t`` enters (set by the keeper)."""
    pidns: int | None = None
    """The pid namespace's inode (set by the keeper)."""
    kept: set[int] = field(default_factory=set)
    """Host pids of the services ``kill_processes(keep_listening=True)`` kept, frozen."""
    stopped: bool = False
    """``stop()`` was called: a keeper starting meanwhile ends itself."""
    agent_done: bool = False
    """The agent's turn ended (``kill_processes``): a disk filled from now on is the agent's doing."""
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    """Clear while the namespaces restart (``kill_processes``, ``set_network``): commands wait for it."""

    def __post_init__(self) -> None:
        self.ready.set()

    def alive(self) -> None:
        """Raise :class:`SandboxError` unless bwrap and its keeper run."""
        if self.proc is None or self.keeper_pid is None:
            raise SandboxError("sandbox is not running (never started, or stopped)")
        if self.proc.returncode is not None:
            raise SandboxError(f"sandbox died (bwrap exited with {self.proc.returncode})")

    async def wait_ready(self, timeout: float) -> None:
        """Wait (up to ``timeout``) for a restart of the namespaces to finish."""
        if not self.ready.is_set():
            try:
                await asyncio.wait_for(self.ready.wait(), timeout)
            except TimeoutError as exc:
                raise SandboxTimeoutError(f"the sandbox was still restarting after {timeout}s") from exc
