"""The local sandbox's cgroups: one per sandbox under the cgroup this process may delegate, limits on
memory, pids and cpu, and the sweep of leftovers from killed runs."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MiB = 1024 * 1024


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22), or None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 else None


@dataclass
class Cgroups:
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


CGROUP_NAME = re.compile(r"tackroom-(\d+)-(\d+)-")
"""A sandbox's cgroup is named ``tackroom-<creator pid>-<creator start time>-<root name>``."""


def cgroup_parents() -> list[Path]:
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


def sweep_cgroups(parents: Sequence[Path]) -> int:
    """Remove the cgroups of sandboxes whose creating process is gone (killing what still runs in them)."""
    removed = 0
    for parent in parents:
        try:
            entries = [d for d in parent.iterdir() if CGROUP_NAME.match(d.name) and d.is_dir()]
        except OSError:
            continue
        for d in entries:
            m = CGROUP_NAME.match(d.name)
            assert m is not None
            if start_time(int(m[1])) != int(m[2]) and Cgroups([d]).remove(wait=1):
                removed += 1
    return removed


def make_cgroups(name: str, memory_mb: int, pids_limit: int, cpus: float) -> tuple[Cgroups | None, list[str], str]:
    """Create and configure the sandbox's cgroups: (cgroups, limits not enforced, why there are none)."""
    with contextlib.suppress(OSError):
        sweep_cgroups(cgroup_parents())  # what sandboxes of killed runs left
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
            return Cgroups([cg]), skipped, ""
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
            return Cgroups(made), skipped, ""
        except OSError as exc:
            reasons.append(f"cgroup v1: {exc}")
            for d in reversed(made):
                with contextlib.suppress(OSError):
                    d.rmdir()
    else:
        reasons.append("cgroup v1: no memory and pids hierarchies mounted")
    return None, [], "; ".join(reasons)
