"""Snapshots: the files under some sandbox paths at one moment, read from ``Sandbox.snapshot``'s tar."""

from __future__ import annotations

import hashlib
import io
import tarfile
import time

from pydantic import BaseModel, Field

import tackroom

DEFAULT_MAX_FILE_BYTES = 25_000_000
DEFAULT_MAX_FILES = 5_000


class SnapshotFile(BaseModel):
    """One regular file. ``data`` is None when the file was over the size limit (then only size/hash are known)."""

    path: str
    size: int
    sha256: str
    data: bytes | None = Field(default=None, repr=False, exclude=True)


class Snapshot(BaseModel):
    """Regular files by absolute sandbox path (``/app/out.csv``), plus what was left out and why."""

    paths: list[str] = Field(default_factory=list)
    """The sandbox paths that were asked for."""
    files: dict[str, SnapshotFile] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    taken_s: float = 0.0

    @classmethod
    def from_tar(cls, archive: bytes, paths: list[str] | None = None, *,
                 max_file_bytes: int = DEFAULT_MAX_FILE_BYTES, max_files: int = DEFAULT_MAX_FILES) -> Snapshot:
        """Parse a tar (as ``Sandbox.snapshot`` returns it); links, devices and directories are skipped."""
        snap = cls(paths=list(paths or []))
        if not archive:
            return snap
        try:
            tar = tarfile.open(fileobj=io.BytesIO(archive), mode="r:*")
        except tarfile.TarError as exc:
            raise tackroom.SandboxError(f"the sandbox snapshot is not a tar archive ({exc}); the sandbox is broken") from exc
        skipped_links = 0
        with tar:
            for member in tar:
                if member.isdir():
                    continue
                if not member.isfile():
                    skipped_links += 1
                    continue
                if len(snap.files) >= max_files:
                    snap.notes.append(f"stopped after {max_files} files; the rest of the snapshot is not compared")
                    break
                path = "/" + member.name.removeprefix("./").lstrip("/")
                handle = tar.extractfile(member)
                if handle is None:
                    continue
                if member.size > max_file_bytes:
                    digest = hashlib.sha256()
                    while chunk := handle.read(1 << 20):
                        digest.update(chunk)
                    snap.files[path] = SnapshotFile(path=path, size=member.size, sha256=digest.hexdigest())
                    snap.notes.append(f"{path}: {member.size} bytes, over the {max_file_bytes}-byte limit; compared by hash")
                    continue
                data = handle.read()
                snap.files[path] = SnapshotFile(path=path, size=len(data), sha256=hashlib.sha256(data).hexdigest(),
                                                data=data)
        if skipped_links:
            snap.notes.append(f"{skipped_links} links or special files skipped")
        return snap


async def take_snapshot(sandbox: tackroom.Sandbox, paths: list[str], *, timeout: float = 120.0,
                        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES, max_files: int = DEFAULT_MAX_FILES) -> Snapshot:
    """Snapshot ``paths`` (files or directories; missing ones are skipped) in a started sandbox.

    Raises :class:`tackroom.SandboxError` (``infra``) when the sandbox cannot
    make the archive, :class:`tackroom.SandboxTimeoutError` past ``timeout``.
    """
    started = time.monotonic()
    paths = sorted(set(paths))
    archive = await sandbox.snapshot(paths, timeout=timeout) if paths else b""
    snap = Snapshot.from_tar(archive, paths, max_file_bytes=max_file_bytes, max_files=max_files)
    snap.taken_s = round(time.monotonic() - started, 4)
    return snap
