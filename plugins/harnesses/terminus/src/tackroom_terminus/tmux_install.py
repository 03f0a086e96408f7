"""Making sure tmux exists in the sandbox before the episode starts.

``tmux_install = "auto"`` (the default) tries, in order:

1. tmux is already there (the local sandbox shares the host's ``/usr``; a task
   image may include it): nothing to do.
2. **Host packages, offline.** When the sandbox is the same Debian-family release
   and architecture as the host and the host has apt: the host downloads tmux and
   the dependencies the sandbox lacks (``apt-get download``, cached under
   ``~/.cache/tackroom/debs/``), uploads the ``.deb`` files and the sandbox
   installs them with ``dpkg -i``. This needs no network inside the sandbox, so it
   works for tasks without ``allow_internet`` (the offline ``debian:bookworm-slim``
   base image has no tmux).
3. **The sandbox's package manager**, when the task allows internet
   (``apt-get``, ``apk``, ``dnf``).

Otherwise setup fails with a :class:`~tackroom.TaskError` that says how to fix
the image. ``"never"`` skips 2 and 3 (the image must carry tmux).
"""

from __future__ import annotations

import asyncio
import shlex
import shutil
import tempfile
import weakref
from pathlib import Path

from tackroom import Sandbox, TaskError, cache_root

TMUX_PACKAGE = "tmux"
_FIX = (
    "add tmux to the task image (`RUN apt-get update && apt-get install -y tmux` in environment/Dockerfile), "
    "allow the task internet access ([environment] allow_internet = true) so the harness can install it, "
    "or run on a Debian host of the sandbox's release so it can install the host's packages"
)
_download_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


def _download_lock() -> asyncio.Lock:
    """One lock per event loop: concurrent trials share the cache folder."""
    loop = asyncio.get_running_loop()
    lock = _download_locks.get(loop)
    if lock is None:
        lock = _download_locks[loop] = asyncio.Lock()
    return lock


def default_cache_dir() -> Path:
    return cache_root() / "debs"


async def _host(argv: list[str], *, timeout: float, cwd: Path | None = None) -> tuple[int, str]:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )
    except FileNotFoundError:
        return 127, f"{argv[0]}: not found"
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return 124, f"{' '.join(argv[:3])} … ran past {timeout:.0f}s"
    return proc.returncode or 0, out.decode(errors="replace")


def _os_release(text: str) -> dict[str, str]:
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip('"')
    return fields


async def has_tmux(sandbox: Sandbox, timeout: float = 30) -> bool:
    return (await sandbox.exec("command -v tmux >/dev/null 2>&1", timeout=timeout)).ok


async def ensure_tmux(sandbox: Sandbox, *, mode: str, cache_dir: Path | None = None, timeout: float = 300) -> str:
    """Make tmux available in ``sandbox``; returns how (``present``, ``host-debs``, ``package-manager``)."""
    if await has_tmux(sandbox):
        return "present"
    if mode == "never":
        raise TaskError(f"tmux is not installed in the sandbox and [harness] tmux_install = 'never'; {_FIX}")
    reasons: list[str] = []
    reason = await _install_host_debs(sandbox, cache_dir or default_cache_dir(), timeout)
    if reason is None and await has_tmux(sandbox):
        return "host-debs"
    reasons.append(f"host packages: {reason or 'installed, but tmux is still not on PATH'}")
    if sandbox.spec.allow_internet:
        reason = await _install_with_package_manager(sandbox, timeout)
        if reason is None and await has_tmux(sandbox):
            return "package-manager"
        reasons.append(f"package manager: {reason or 'installed, but tmux is still not on PATH'}")
    else:
        reasons.append("package manager: not tried, the task does not allow internet access")
    raise TaskError(f"tmux is not installed in the sandbox and could not be installed ({'; '.join(reasons)}); {_FIX}")


async def _install_with_package_manager(sandbox: Sandbox, timeout: float) -> str | None:
    script = (
        "if command -v apt-get >/dev/null; then "
        "  export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq --no-install-recommends tmux; "
        "elif command -v apk >/dev/null; then apk add --no-cache tmux; "
        "elif command -v dnf >/dev/null; then dnf install -y tmux; "
        "else echo 'no apt-get, apk or dnf in the sandbox' >&2; exit 127; fi"
    )
    result = await sandbox.exec(script, timeout=timeout)
    return None if result.ok else f"exit {result.exit_code}: {(result.stderr or result.stdout).strip()[-300:]}"


async def _install_host_debs(sandbox: Sandbox, cache_dir: Path, timeout: float) -> str | None:
    """Install tmux from packages the host downloads; returns why not, or None on success."""
    if shutil.which("apt-get") is None or shutil.which("dpkg") is None or not Path("/etc/os-release").is_file():
        return "the host has no apt-get/dpkg"
    probe = await sandbox.exec(
        "cat /etc/os-release 2>/dev/null; echo ARCH=$(dpkg --print-architecture 2>/dev/null); "
        "echo '--installed--'; dpkg-query -W -f='${Package}\\n' 2>/dev/null",
        timeout=60,
    )
    head, _, installed_text = probe.stdout.partition("--installed--")
    box = _os_release(head)
    host = _os_release(Path("/etc/os-release").read_text())
    _, host_arch = await _host(["dpkg", "--print-architecture"], timeout=30)
    host_arch = host_arch.strip()
    if not box.get("ARCH"):
        return "the sandbox has no dpkg"
    box_release = (box.get("ID"), box.get("VERSION_CODENAME") or box.get("VERSION_ID"), box["ARCH"])
    host_release = (host.get("ID"), host.get("VERSION_CODENAME") or host.get("VERSION_ID"), host_arch)
    if box_release != host_release:
        return f"the sandbox is {'/'.join(map(str, box_release))}, the host {'/'.join(map(str, host_release))}"
    installed = {line.strip() for line in installed_text.splitlines() if line.strip()}
    code, out = await _host(
        ["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
         "--no-breaks", "--no-replaces", "--no-enhances", TMUX_PACKAGE],
        timeout=60,
    )
    if code != 0:
        return f"apt-cache depends failed: {out.strip()[-300:]}"
    closure = [line.strip() for line in out.splitlines() if line and not line[0].isspace() and not line.startswith("<")]
    wanted = [p for p in dict.fromkeys(closure) if p.split(":")[0] not in installed]
    if not wanted:
        return "tmux's packages are all installed, yet tmux is missing"
    folder = cache_dir / "-".join(map(str, box_release))
    async with _download_lock():
        folder.mkdir(parents=True, exist_ok=True)
        missing = [p for p in wanted if not list(folder.glob(f"{p.split(':')[0]}_*.deb"))]
        if missing:
            with tempfile.TemporaryDirectory(dir=folder) as tmp:
                code, out = await _host(
                    ["apt-get", "download", "-o", "APT::Sandbox::User=root", *missing], timeout=timeout, cwd=Path(tmp)
                )
                if code != 0:
                    return f"apt-get download {' '.join(missing)} failed on the host: {out.strip()[-300:]}"
                for deb in Path(tmp).glob("*.deb"):
                    deb.replace(folder / deb.name)
    debs = [deb for p in wanted for deb in sorted(folder.glob(f"{p.split(':')[0]}_*.deb"))[-1:]]
    target = "/tmp/.tackroom-debs"
    for deb in debs:
        await sandbox.upload(deb, f"{target}/{deb.name}", timeout=120)
    paths = " ".join(shlex.quote(f"{target}/{deb.name}") for deb in debs)
    result = await sandbox.exec(f"dpkg -i {paths}; rc=$?; rm -rf {target}; exit $rc", timeout=timeout)
    if not result.ok:
        return f"dpkg -i failed in the sandbox (exit {result.exit_code}): {(result.stderr or result.stdout).strip()[-300:]}"
    return None
