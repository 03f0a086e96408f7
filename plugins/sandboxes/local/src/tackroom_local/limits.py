"""The local sandbox's limits: ``storage_mb`` as a size-limited filesystem, ``memory_mb``/``cpus``/``pids_limit``
as a cgroup of the sandbox's own (:mod:`tackroom_local.cgroups`) or, without one, as rlimits; and the prefix every
process of the sandbox starts under to join them."""

from __future__ import annotations

import os
import subprocess

from tackroom import SandboxError
from tackroom_local.cgroups import MiB, make_cgroups
from tackroom_local.keeper import tool
from tackroom_local.markers import DISK_SUFFIX, write_json

JOIN_CGROUPS = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
"""``sh -c`` prefix: move this process into each cgroup.procs named before ``--``, then exec the rest."""


class SandboxLimits:
    """The limits half of :class:`~tackroom_local.sandbox.LocalSandbox`."""

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
        write_json(self.marker, self._marker_data)
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
            cgroups, skipped, why = make_cgroups(name, spec.memory_mb, opts.pids_limit, spec.cpus)
            if cgroups is not None:
                self._cgroups = cgroups
                assert self._marker_data is not None
                self._marker_data["cgroups"] = [str(d) for d in cgroups.dirs]
                write_json(self.marker, self._marker_data)
                if skipped:
                    self.notes.append(f"local sandbox: {', '.join(skipped)} not enforced (no cpu controller in its cgroup)")
                return
            if opts.limits == "cgroup":
                raise SandboxError(
                    f"the local sandbox cannot enforce {wanted} with a cgroup ({why}); run tackroom as root on a host "
                    'with cgroup memory and pids controllers, or set [sandbox] limits = "rlimit" to accept per-process '
                    "rlimits instead"
                )
        self._tools["prlimit"] = tool("prlimit", "it sets the sandbox's rlimits when no cgroup is writable")
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
