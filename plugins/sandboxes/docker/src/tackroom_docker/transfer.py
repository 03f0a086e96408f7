"""Host side of file transfer: tar archives that `docker cp` reads and writes.

Uploads are packed with paths relative to ``/`` so `docker cp - CONTAINER:/`
creates missing parents; downloads are unpacked with Python's ``data`` filter,
so a member that would land outside the destination is refused.
"""

from __future__ import annotations

import io
import posixpath
import shutil
import tarfile
import tempfile
from pathlib import Path

from tackroom import SandboxPathError


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def pack_upload(source: Path, dest: str) -> bytes:
    """A tar whose members land at ``dest`` when extracted at ``/``.

    A file becomes ``dest``; a directory's contents land inside ``dest`` (the
    directory itself gets no member, so an existing ``dest`` keeps its mode and
    owner; an empty directory gets one so that ``dest`` exists afterwards).
    """
    target = dest.lstrip("/")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        if source.is_dir():
            children = sorted(source.iterdir())
            if not children:
                tar.add(source, arcname=target, recursive=False, filter=_root_owned)
            for child in children:
                tar.add(child, arcname=posixpath.join(target, child.name), filter=_root_owned)
        else:
            tar.add(source, arcname=target, filter=_root_owned)
    return buf.getvalue()


def _safe_member(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """Python's ``data`` filter, except that unsafe links and device files are skipped, not fatal."""
    try:
        return tarfile.data_filter(member, dest)
    except (tarfile.AbsoluteLinkError, tarfile.LinkOutsideDestinationError, tarfile.SpecialFileError):
        return None
    except tarfile.FilterError as exc:
        raise SandboxPathError(f"refusing to unpack {member.name!r}: {exc}") from exc


def unpack_download(archive: Path, dest: Path) -> None:
    """Unpack a `docker cp CONTAINER:SRC -` archive (one top entry, SRC's basename) to ``dest``.

    A file becomes ``dest``; a directory's contents are merged into ``dest``.
    """
    dest = dest.absolute()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".tackroom-dl-", dir=dest.parent) as tmp, tarfile.open(archive) as tar:
        members = tar.getmembers()
        if not members:
            raise FileNotFoundError(f"the sandbox sent an empty archive for {dest.name}")
        top = members[0].name.split("/")[0]
        tar.extractall(tmp, filter=_safe_member)
        unpacked = Path(tmp) / top
        if unpacked.is_dir() and not unpacked.is_symlink():
            shutil.copytree(unpacked, dest, symlinks=True, dirs_exist_ok=True)
        else:
            if dest.is_dir() and not dest.is_symlink():
                raise IsADirectoryError(f"{dest} is a directory; cannot download a file over it")
            unpacked.replace(dest)
