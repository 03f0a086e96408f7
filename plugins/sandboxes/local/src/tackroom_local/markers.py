"""Owner markers: which process made which local sandbox, and the cleanup of those whose owner is gone.

Each sandbox writes ``<root>.owner.json`` beside its per-trial root (out of the agent's reach): the creating
process's pid, start time and boot id, the bwrap's and the keeper's, the host uid and the cgroup directories.
:func:`remove_leftovers` (``tackroom sandbox cleanup --sandbox local``) removes the roots, bwraps and cgroups of
every marker whose owner is gone; a live owner's sandboxes are never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import uuid
from pathlib import Path

from tackroom import SandboxError
from tackroom_local.cgroups import CGROUP_NAME, Cgroups, start_time

MARKER_SUFFIX = ".owner.json"
DISK_SUFFIX = ".disk"
"""Beside a root: the file of its size-limited filesystem (``storage_mb``, run as root)."""
INSTALLED_SUFFIX = ".installed"
"""Beside a root: the copies of what the task's Dockerfile installed (:mod:`tackroom_local.installed`)."""


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def same_process(pid: object, start: object, boot: object) -> bool:
    """Whether ``pid`` is still the process that had ``start`` time in boot ``boot``."""
    if not isinstance(pid, int) or pid <= 0 or boot != boot_id():
        return False
    return start is not None and start_time(pid) == start


def check_private_dir(path: Path) -> None:
    """Roots, markers and the keeper live here: it must be ours and not writable by anyone else."""
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise SandboxError(
            f"{path} must be a directory owned by uid {os.geteuid()} and writable only by it (it holds the local "
            f"sandbox's roots); it is mode {stat.filemode(st.st_mode)} owned by uid {st.st_uid}. Remove it or set "
            "[sandbox] root_dir to another directory"
        )



class OwnerMarker:
    """One sandbox's owner marker, ``<root>.owner.json`` beside its root: :meth:`create` writes it before the root
    exists, :meth:`record` adds what the sandbox makes later (its cgroups, disk, bwrap and keeper), :meth:`remove`
    deletes it once everything it names is gone."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict | None = None
        """What the marker holds; None until :meth:`create` wrote it."""

    def create(self, root: Path, uid: int | None) -> None:
        self.data = {
            "root": root.name, "pid": os.getpid(), "start_time": start_time(os.getpid()), "boot_id": boot_id(),
            "uid": uid, "cgroups": [], "bwrap": None, "keeper": None,
        }  # fmt: skip
        write_json(self.path, self.data)

    def record(self, **fields: object) -> None:
        """Add ``fields`` and write the marker again (nothing when it was never created)."""
        if self.data is not None:
            self.data.update(fields)
            write_json(self.path, self.data)

    def remove(self) -> None:
        if self.data is not None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def rmtree(path: Path) -> None:
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



def remove_leftovers(base: Path) -> int:
    """Remove what every sandbox whose owner process is gone left behind; return how many roots went."""
    if not base.is_dir():
        return 0
    check_private_dir(base)
    removed = 0
    for marker in sorted(base.glob(f"*{MARKER_SUFFIX}")):
        try:
            data = json.loads(marker.read_text())
            name = data["root"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if same_process(data.get("pid"), data.get("start_time"), data.get("boot_id")):
            continue  # a live run's sandbox
        for key in ("keeper", "bwrap"):  # the keeper's death empties the pid namespace
            proc = data.get(key)
            if isinstance(proc, list) and len(proc) == 2 and same_process(proc[0], proc[1], data.get("boot_id")):
                with contextlib.suppress(OSError):
                    os.kill(proc[0], signal.SIGKILL)
        cgroups = [Path(p) for p in data.get("cgroups") or [] if is_our_cgroup(p, name)]
        cgroups_gone = Cgroups(cgroups).remove(wait=5) if cgroups else True
        root = base / name if isinstance(name, str) and "/" not in name and name not in ("", ".", "..") else None
        if root is not None and (root.exists() or root.is_symlink()):
            disk = data.get("disk")
            unmount_disk(root, base / disk if isinstance(disk, str) and disk == f"{name}{DISK_SUFFIX}" else None)
            rmtree(root)
            removed += 1
        if root is not None:
            rmtree(base / f"{name}{INSTALLED_SUFFIX}")
        if cgroups_gone:
            marker.unlink(missing_ok=True)
    return removed


def unmount_disk(root: Path, disk: Path | None) -> None:
    """Unmount ``storage_mb``'s filesystem from ``root`` (when mounted) and remove its file."""
    if os.path.ismount(root):
        subprocess.run(["umount", "-l", str(root)], capture_output=True, timeout=60, check=True)
    if disk is not None:
        disk.unlink(missing_ok=True)


def base_dir(root_dir: str | None) -> Path:
    """Where the per-trial roots and their owner markers live (links in the configured path resolved once)."""
    return Path(os.path.realpath(root_dir or Path(tempfile.gettempdir()) / "tackroom-local"))


def is_our_cgroup(path: object, root_name: str) -> bool:
    return isinstance(path, str) and path.startswith("/sys/fs/cgroup/") and ".." not in path.split("/") \
        and bool(CGROUP_NAME.match(Path(path).name)) and Path(path).name.endswith(f"-{root_name}")  # fmt: skip

