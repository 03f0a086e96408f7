"""Unpacking a task's world snapshot (zip or tar, gzip/bz2/xz) without trusting it.

A snapshot comes with a task file from elsewhere: every member is checked before a byte is written. Refused,
with the member named: absolute paths, ``..`` components, links (symbolic or hard), devices and other special
files, names that repeat, more members than ``max_members``, more than ``max_bytes`` unpacked in all (counted
as the bytes come out, so a lying header does not help), and a zip member whose compression ratio is past
``max_ratio`` (a zip bomb). Nothing is left behind when an archive is refused.
"""

from __future__ import annotations

import shutil
import stat
import tarfile
import zipfile
from pathlib import Path, PurePosixPath
from typing import IO

from pydantic import BaseModel

from tackroom_archipelago.errors import WorldFormatError


class SnapshotLimits(BaseModel):
    """How much a snapshot may unpack to."""

    max_bytes: int = 2 * 1024**3
    max_members: int = 100_000
    max_ratio: float = 200.0
    """A zip member may unpack to at most this many times its compressed size (small members are exempt)."""


class UnsafeArchiveError(WorldFormatError):
    """The snapshot holds a member tackroom will not unpack (the message names it and why)."""


_CHUNK = 1 << 20


def member_path(name: str, archive: Path) -> PurePosixPath | None:
    """The member's relative path, ``None`` for the archive's root entry; :class:`UnsafeArchiveError` when it
    would land outside the destination."""
    if "\\" in name or "\x00" in name:
        raise UnsafeArchiveError(f"{archive}: member {name!r} has a backslash or NUL in its name; refused")
    if name.startswith("/"):
        raise UnsafeArchiveError(f"{archive}: member {name!r} is an absolute path; refused")
    parts = [p for p in PurePosixPath(name).parts if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchiveError(f"{archive}: member {name!r} climbs out of the snapshot with '..'; refused")
    return PurePosixPath(*parts) if parts else None


def unpack_snapshot(archive: Path, dest: Path, limits: SnapshotLimits | None = None) -> list[PurePosixPath]:
    """Unpack ``archive`` (zip or tar) into the new folder ``dest``; the regular files written, relative to it."""
    limits = limits or SnapshotLimits()
    if dest.exists():
        raise WorldFormatError(f"{dest}: already exists; snapshots unpack into a new folder")
    try:
        if zipfile.is_zipfile(archive):
            return _unpack_zip(archive, dest, limits)
        if tarfile.is_tarfile(archive):
            return _unpack_tar(archive, dest, limits)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise WorldFormatError(f"{archive}: a broken archive ({type(exc).__name__}: {exc})") from exc
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    raise WorldFormatError(f"{archive}: neither a zip nor a tar archive")


class _Budget:
    def __init__(self, archive: Path, limits: SnapshotLimits) -> None:
        self.archive, self.limits, self.written, self.members = archive, limits, 0, 0
        self.seen: set[PurePosixPath] = set()

    def member(self, rel: PurePosixPath) -> None:
        self.members += 1
        if self.members > self.limits.max_members:
            raise UnsafeArchiveError(f"{self.archive}: more than {self.limits.max_members} members; refused")
        if rel in self.seen:
            raise UnsafeArchiveError(f"{self.archive}: member {str(rel)!r} appears twice; refused")
        self.seen.add(rel)

    def copy(self, source: IO[bytes], target: Path, name: str, cap: int | None = None) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        own = 0
        with target.open("xb") as out:
            while chunk := source.read(_CHUNK):
                own += len(chunk)
                self.written += len(chunk)
                if self.written > self.limits.max_bytes:
                    raise UnsafeArchiveError(f"{self.archive}: unpacks to more than {self.limits.max_bytes} bytes "
                                             f"(at member {name!r}); refused as a possible archive bomb")
                if cap is not None and own > cap:
                    raise UnsafeArchiveError(f"{self.archive}: member {name!r} unpacks to more than its header says; "
                                             "refused")
                out.write(chunk)


def _unpack_zip(archive: Path, dest: Path, limits: SnapshotLimits) -> list[PurePosixPath]:
    budget = _Budget(archive, limits)
    files: list[PurePosixPath] = []
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        for info in infos:  # check everything before writing anything
            rel = member_path(info.filename, archive)
            mode = info.external_attr >> 16
            if mode and stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
                kind = "a symbolic link" if stat.S_ISLNK(mode) else "a special file"
                raise UnsafeArchiveError(f"{archive}: member {info.filename!r} is {kind}; refused")
            if rel is None:
                continue
            budget.member(rel)
            if info.file_size > 1_000_000 and info.file_size > limits.max_ratio * max(info.compress_size, 1):
                raise UnsafeArchiveError(f"{archive}: member {info.filename!r} expands {info.file_size} bytes from "
                                         f"{info.compress_size} (over {limits.max_ratio:.0f}x); refused as a zip bomb")
        dest.mkdir(parents=True)
        for info in infos:
            rel = member_path(info.filename, archive)
            if rel is None:
                continue
            if info.is_dir():
                (dest / rel).mkdir(parents=True, exist_ok=True)
                continue
            with zf.open(info) as source:
                budget.copy(source, dest / rel, info.filename, cap=info.file_size)
            files.append(rel)
    return files


def _unpack_tar(archive: Path, dest: Path, limits: SnapshotLimits) -> list[PurePosixPath]:
    budget = _Budget(archive, limits)
    files: list[PurePosixPath] = []
    with tarfile.open(archive, mode="r:*") as tar:
        members, declared = [], 0
        for member in tar:  # streams: a gzip bomb is caught by the byte count while copying
            rel = member_path(member.name, archive)
            if member.issym() or member.islnk():
                raise UnsafeArchiveError(f"{archive}: member {member.name!r} is a link (to {member.linkname!r}); refused")
            if not (member.isfile() or member.isdir()):
                raise UnsafeArchiveError(f"{archive}: member {member.name!r} is a device or special file; refused")
            if rel is None:
                continue
            budget.member(rel)
            declared += member.size
            if declared > limits.max_bytes:
                raise UnsafeArchiveError(f"{archive}: its headers declare more than {limits.max_bytes} bytes (at member "
                                         f"{member.name!r}); refused as a possible archive bomb")
            members.append((member, rel))
        dest.mkdir(parents=True)
        for member, rel in members:
            if member.isdir():
                (dest / rel).mkdir(parents=True, exist_ok=True)
                continue
            source = tar.extractfile(member)
            if source is None:
                continue
            budget.copy(source, dest / rel, member.name, cap=member.size)
            files.append(rel)
    return files


__all__ = ["SnapshotLimits", "UnsafeArchiveError", "member_path", "unpack_snapshot"]
