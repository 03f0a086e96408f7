"""The local sandbox's limits: ``storage_mb`` as a size-limited filesystem, ``memory_mb``/``cpus``/``pids_limit``
as a cgroup of the sandbox's own (:mod:`tackroom_local.cgroups`) or, without one, as rlimits; and the prefix every
process of the sandbox starts under to join them (:attr:`Namespaces.prefix`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Literal

from tackroom import SandboxError, SandboxSpec
from tackroom_local.cgroups import MiB, make_cgroups
from tackroom_local.keeper import tool
from tackroom_local.markers import DISK_SUFFIX
from tackroom_local.namespaces import Namespaces

JOIN_CGROUPS = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
"""``sh -c`` prefix: move this process into each cgroup.procs named before ``--``, then exec the rest."""


class SandboxLimits:
    """The sandbox's limits: its disk (:meth:`limit_storage`), then its cgroup or rlimits (:meth:`setup`), which set
    the shared :class:`Namespaces`' ``cgroups`` and ``prefix``; what is not enforced goes into ``notes``."""

    def __init__(self, ns: Namespaces, spec: SandboxSpec, *, pids_limit: int,
                 mode: Literal["auto", "cgroup", "rlimit"], notes: list[str]) -> None:
        self.ns, self.spec, self.pids_limit, self.mode, self.notes = ns, spec, pids_limit, mode, notes
        self.disk: Path | None = None
        """The file of the size-limited filesystem mounted on the root (``storage_mb``, run as root), else None."""

    def limit_storage(self) -> None:
        """``storage_mb``: run as root, the per-trial root (every writable folder) is an ext4 filesystem of that
        size on a sparse file beside it, loop-mounted, so writing past it fails inside with ENOSPC."""
        size, root = self.spec.storage_mb, self.ns.root
        if size is None:
            return
        if os.geteuid() != 0:
            self.notes.append(f"storage_mb = {size} is not enforced: the local sandbox needs root to mount a "
                              "size-limited filesystem (the docker sandbox enforces it)")
            return
        disk = root.with_name(f"{root.name}{DISK_SUFFIX}")
        self.ns.owner.record(disk=disk.name)
        with open(disk, "wb") as f:
            f.truncate(size * 1024 * 1024)
        for argv in (["mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", str(disk)],
                     ["mount", "-o", "loop,nodev,nosuid", str(disk), str(root)]):
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            if done.returncode != 0:
                raise SandboxError(f"storage_mb = {size}: {argv[0]} failed: {(done.stderr or done.stdout).strip()[:300]}")
        self.disk = disk
        os.chmod(root, 0o755)

    def setup(self) -> None:
        """A cgroup of the sandbox's own (``limits`` "auto" or "cgroup"), else rlimits; sets ``prefix``."""
        spec, ns = self.spec, self.ns
        wanted = f"memory_mb={spec.memory_mb}, cpus={spec.cpus:g}, pids_limit={self.pids_limit}"
        why = "limits = \"rlimit\" was chosen"
        if self.mode != "rlimit":
            owner = ns.owner.data
            assert owner is not None
            name = f"tackroom-{owner['pid']}-{owner['start_time']}-{ns.root.name}"
            cgroups, skipped, why = make_cgroups(name, spec.memory_mb, self.pids_limit, spec.cpus)
            if cgroups is not None:
                ns.cgroups = cgroups
                ns.owner.record(cgroups=[str(d) for d in cgroups.dirs])
                ns.prefix = ["/bin/sh", "-c", JOIN_CGROUPS, "sh", *cgroups.procs_files, "--"]
                if skipped:
                    self.notes.append(f"local sandbox: {', '.join(skipped)} not enforced (no cpu controller in its cgroup)")
                return
            if self.mode == "cgroup":
                raise SandboxError(
                    f"the local sandbox cannot enforce {wanted} with a cgroup ({why}); run tackroom as root on a host "
                    'with cgroup memory and pids controllers, or set [sandbox] limits = "rlimit" to accept per-process '
                    "rlimits instead"
                )
        ns.tools["prlimit"] = tool("prlimit", "it sets the sandbox's rlimits when no cgroup is writable")
        ns.prefix = [ns.tools["prlimit"], f"--as={spec.memory_mb * MiB}", f"--nproc={self.pids_limit}", "--"]
        self.notes.append(
            f"local sandbox: no writable cgroup ({why}); memory_mb={spec.memory_mb} caps each process's address space "
            f"(RLIMIT_AS), pids_limit={self.pids_limit} caps the processes of the sandbox's user (RLIMIT_NPROC), "
            f"cpus={spec.cpus:g} is not enforced"
        )
