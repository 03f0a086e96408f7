"""The sandbox's own root toolset: what kill, restore, the transfer checks and grading run, never the agent's.

A static busybox (Debian's ``busybox-static``; scripts/setup installs it) with one link per applet lives in a
host folder under the tackroom cache and is bind-mounted read-only at :data:`MOUNT` into every container. Root
helpers start on the host with ``nsenter`` into the container's namespaces and run ``/.tackroom/bin/sh`` with
``PATH=/.tackroom/bin``: nothing resolves through the agent's ``PATH``, the container's shell or its
``/etc/passwd``, and the helper is outside the container's cgroup, so an exhausted pids limit cannot stop it.
Inside the container the mount cannot be removed, unmounted or written (no CAP_SYS_ADMIN there).
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

from tackroom import ConfigError, cache_root
from tackroom_docker.engine import CallResult, run_host

MOUNT = "/.tackroom"
BIN = f"{MOUNT}/bin"
STAGE = f"{MOUNT}/stage"
"""An empty folder of the toolset: the grader's private tmpfs is mounted there, in its own mount namespace."""
HELPER_ENV = {"PATH": BIN, "HOME": "/", "LC_ALL": "C"}
INSTALL_HINT = "install Debian's busybox-static (`apt-get install busybox-static`; scripts/setup does) or set the docker sandbox option toolset_busybox"


def is_static_elf(path: Path) -> bool:
    """Whether ``path`` is an ELF executable without a program interpreter (it loads no library of the container)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF":
                return False
            is64, little = head[4] == 2, head[5] == 1
            end = "<" if little else ">"
            if is64:
                phoff, phentsize, phnum = struct.unpack(end + "Q", head[32:40])[0], *struct.unpack(end + "HH", head[54:58])
            else:
                phoff, phentsize, phnum = struct.unpack(end + "I", head[28:32])[0], *struct.unpack(end + "HH", head[42:46])
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError:
        return False
    return all(struct.unpack(end + "I", table[i * phentsize:i * phentsize + 4])[0] != 3 for i in range(phnum))  # PT_INTERP


def find_busybox(explicit: str | None = None) -> Path:
    """The static busybox to mount: ``explicit``, else ``busybox`` on PATH, else /bin/busybox."""
    candidates = [explicit] if explicit else [shutil.which("busybox"), "/bin/busybox", "/usr/bin/busybox"]
    for c in candidates:
        if c and Path(c).is_file():
            if is_static_elf(Path(c)):
                return Path(c).resolve()
            if explicit:
                raise ConfigError(f"sandbox.toolset_busybox = {explicit!r} is not a static executable; {INSTALL_HINT}")
    raise ConfigError(f"the docker sandbox needs a static busybox for its root helpers and none was found; {INSTALL_HINT}")


def toolset_dir(busybox: Path) -> Path:
    """The host folder mounted at :data:`MOUNT` (made once per busybox build): ``bin/`` with busybox and a link
    per applet, and the empty ``stage/``."""
    data = busybox.read_bytes()
    root = cache_root() / "docker-toolset" / hashlib.sha256(data).hexdigest()[:16]
    if (root / "bin" / "sh").is_symlink():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    # One builder at a time, across the trials of a process and across processes; the others wait and use its work.
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not (root / "bin" / "sh").is_symlink():
                _build_toolset(busybox, data, root)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return root


def _build_toolset(busybox: Path, data: bytes, root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)  # a half-made folder from a builder that died
    tmp = Path(tempfile.mkdtemp(prefix=f"{root.name}.tmp-", dir=root.parent))
    (tmp / "bin").mkdir()
    (tmp / "stage").mkdir()
    (tmp / "bin" / "busybox").write_bytes(data)
    (tmp / "bin" / "busybox").chmod(0o755)
    listed = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, timeout=30, check=True)
    for applet in listed.stdout.split():
        if applet != "busybox" and "/" not in applet:
            (tmp / "bin" / applet).symlink_to("busybox")
    for d in (tmp, tmp / "bin", tmp / "stage"):
        d.chmod(0o755)
    tmp.rename(root)


def mount_args(folder: Path) -> list[str]:
    return ["--mount", f"type=bind,src={folder},dst={MOUNT},readonly"]


def nsenter_binary() -> str:
    found = shutil.which("nsenter") or next((p for p in ("/usr/bin/nsenter", "/bin/nsenter") if Path(p).is_file()), None)
    if found is None:
        raise ConfigError("the docker sandbox runs its root helpers with nsenter from the host: install util-linux")
    return found


async def run_in_container(
    pid: int,
    script: str,
    *args: str,
    timeout: float,
    net: bool = True,
    stdin: bytes | None = None,
    stdout_path: Path | None = None,
    output_limit: int = 1_000_000,
) -> CallResult:
    """Run ``script`` with the toolset's sh as host root inside the namespaces of container process ``pid``
    (mount, pid, uts, ipc and, with ``net``, network), from ``/``, with ``PATH=/.tackroom/bin``."""
    namespaces = ["-m", "-u", "-i", "-p", *(["-n"] if net else [])]
    argv = [nsenter_binary(), "-t", str(pid), *namespaces, "-r", "--", f"{BIN}/sh", "-c", f"cd / || exit 125\n{script}",
            "tackroom", *args]
    return await run_host(argv, timeout=timeout, stdin=stdin, stdout_path=stdout_path, output_limit=output_limit,
                          env=dict(HELPER_ENV))
