"""Offline base images: ``debian:bookworm-slim`` built from Debian's packages, no registry needed.

``debootstrap --variant=minbase`` makes a root filesystem from a Debian mirror
(reachable where a container registry is not), slimmed like the official
``-slim`` images, archived once under the cache directory, and turned into an
image with ``docker import``. Later runs only import the cached archive.
"""

from __future__ import annotations

import asyncio
import os
import platform
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from tackroom import SandboxError, cache_root
from tackroom_docker.engine import DockerCLI

DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SECURITY_MIRROR = "http://deb.debian.org/debian-security"

# Keep the image slim after later `apt-get install`s too (what the official -slim images do).
DPKG_SLIM = """\
# Written by `tackroom images bootstrap`: no docs, man pages or translations in images.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
"""

APT_CLEAN = """\
// Written by `tackroom images bootstrap`: do not keep downloaded packages in image layers.
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
"""


class BaseImage(BaseModel):
    """A base image tackroom can build offline."""

    tag: str
    suite: str
    variant: str = "minbase"

    @property
    def archive_name(self) -> str:
        return f"{self.suite}-{self.variant}-slim-{debian_arch()}.tar"


BASE_IMAGES: dict[str, BaseImage] = {
    "debian:bookworm-slim": BaseImage(tag="debian:bookworm-slim", suite="bookworm"),
}


class BootstrapResult(BaseModel):
    """What ``tackroom images bootstrap`` did for one image."""

    tag: str
    action: str
    """``present`` (tag existed, nothing done), ``imported`` (from the cached archive) or ``built`` (debootstrap ran)."""
    archive: str | None = None
    image_id: str | None = None
    duration_s: float


def debian_arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)


def cache_dir() -> Path:
    """``<tackroom cache>/images`` (``$TACKROOM_CACHE``, default ``~/.cache/tackroom``)."""
    return cache_root() / "images"


def slim_rootfs(root: Path, *, suite: str, mirror: str, security_mirror: str) -> None:
    """Trim a debootstrapped tree the way Debian's -slim images are trimmed, and point apt at the mirror."""
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (root / cache).glob("*"):
            if entry.is_file() or entry.is_symlink():
                entry.unlink()
    for entry in (root / "var/cache/apt").glob("*.bin"):
        entry.unlink()
    for sub in ("usr/share/man", "usr/share/info", "usr/share/groff", "usr/share/lintian"):
        for entry in (root / sub).glob("*"):
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    for entry in (root / "usr/share/locale").glob("*"):
        if entry.name != "locale.alias":
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    for doc in (root / "usr/share/doc").glob("*"):
        if doc.is_dir() and not doc.is_symlink():
            for entry in doc.iterdir():
                if entry.name != "copyright":
                    shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    for log in (root / "var/log").rglob("*"):
        if log.is_file():
            log.write_bytes(b"")
    (root / "etc/dpkg/dpkg.cfg.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/dpkg/dpkg.cfg.d/tackroom-slim").write_text(DPKG_SLIM)
    (root / "etc/apt/apt.conf.d/tackroom-clean").write_text(APT_CLEAN)
    # Docker mounts its own resolv.conf and hostname; the build host's must not leak into the image.
    for leaked in ("etc/resolv.conf", "etc/hostname"):
        (root / leaked).unlink(missing_ok=True)
    (root / "etc/apt/sources.list").unlink(missing_ok=True)
    (root / "etc/apt/sources.list.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/apt/sources.list.d/debian.sources").write_text(
        f"Types: deb\nURIs: {mirror}\nSuites: {suite} {suite}-updates\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        f"Types: deb\nURIs: {security_mirror}\nSuites: {suite}-security\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )


def build_rootfs_archive(image: BaseImage, archive: Path, *, mirror: str, security_mirror: str, timeout: float) -> None:
    """Run debootstrap and write the slimmed root filesystem to ``archive`` (atomically)."""
    if os.geteuid() != 0:
        raise SandboxError(
            "debootstrap needs root to build the base image: run `sudo uv run tackroom images bootstrap` "
            f"(later runs only `docker import` the cached archive {archive})"
        )
    if shutil.which("debootstrap") is None:
        raise SandboxError("debootstrap is not installed: `apt-get install debootstrap` (scripts/setup does this)")
    archive.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryDirectory(prefix="rootfs-", dir=archive.parent) as tmp:
        root = Path(tmp) / "root"
        proc = subprocess.run(
            ["debootstrap", f"--variant={image.variant}", f"--arch={debian_arch()}", image.suite, str(root), mirror],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            log = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
            raise SandboxError(
                f"debootstrap of {image.suite} from {mirror} failed (is the mirror reachable? pass --mirror):\n" + "\n".join(log)
            )
        slim_rootfs(root, suite=image.suite, mirror=mirror, security_mirror=security_mirror)
        partial = archive.with_suffix(".partial")
        subprocess.run(
            ["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-cf", str(partial), "."],
            check=True,
            capture_output=True,
            timeout=max(30.0, deadline - time.monotonic()),
        )
        partial.replace(archive)


async def import_archive(cli: DockerCLI, image: BaseImage, archive: Path, *, timeout: float) -> str:
    """``docker import`` the archive as ``image.tag``; returns the image id."""
    result = await cli.run(
        [
            "import",
            "--change", 'CMD ["bash"]',
            "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "--change", "LABEL tackroom.managed=1",
            "--change", f"LABEL tackroom.base={image.tag}",
            "-", image.tag,
        ],
        stdin=archive,
        timeout=timeout,
    )  # fmt: skip
    if not result.ok:
        raise SandboxError(f"importing {archive} as {image.tag} failed: {result.describe()}")
    return result.out.strip()


async def bootstrap(
    tag: str = "debian:bookworm-slim",
    *,
    force: bool = False,
    refresh: bool = False,
    mirror: str = DEFAULT_MIRROR,
    security_mirror: str = DEFAULT_SECURITY_MIRROR,
    cli: DockerCLI | None = None,
    timeout: float = 900.0,
    progress: Callable[[str], None] | None = None,
) -> BootstrapResult:
    """Make ``tag`` exist locally. Skips when it exists (unless ``force``); reuses the cached
    root filesystem archive (unless ``refresh``). ``progress`` receives one line per slow step."""
    say = progress or (lambda _line: None)
    if tag not in BASE_IMAGES:
        raise SandboxError(f"no offline recipe for {tag!r}; known: {', '.join(BASE_IMAGES)}")
    image = BASE_IMAGES[tag]
    cli = cli or DockerCLI()
    started = time.monotonic()
    existing = await cli.image_exists(tag)
    if existing is not None and not force and not refresh:
        return BootstrapResult(tag=tag, action="present", image_id=existing.get("Id"), duration_s=time.monotonic() - started)
    archive = cache_dir() / image.archive_name
    action = "imported"
    if refresh or not archive.is_file():
        say(f"running debootstrap --variant={image.variant} {image.suite} from {mirror} (about a minute)")
        await asyncio.to_thread(
            build_rootfs_archive, image, archive, mirror=mirror, security_mirror=security_mirror, timeout=timeout
        )
        action = "built"
    say(f"importing {archive} as {tag}")
    image_id = await import_archive(cli, image, archive, timeout=max(60.0, timeout - (time.monotonic() - started)))
    if existing is not None and existing.get("Id") != image_id:
        # The previous import is now untagged; drop it unless a container still uses it.
        await cli.run(["image", "rm", existing["Id"]], timeout=60)
    return BootstrapResult(tag=tag, action=action, archive=str(archive), image_id=image_id, duration_s=time.monotonic() - started)
