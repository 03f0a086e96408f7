"""Host side of file transfer: tar archives that `docker cp` reads and writes.

Uploads are packed with paths relative to ``/`` so `docker cp - CONTAINER:/`
creates missing parents (the sandbox first checks that no directory above the
destination is a link). Downloads are unpacked by
:func:`tackroom_sandbox_kit.extract_tar`: every member lands below the
destination, nothing is written through a link on the host, absolute names and
``..`` are refused, links that could lead out and special files are left out.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
from pathlib import Path

from tackroom_sandbox_kit import extract_tar


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


def unpack_download(archive: Path, dest: Path) -> list[str]:
    """Unpack a `docker cp CONTAINER:SRC -` archive (one top entry, SRC's basename) to ``dest``.

    A file becomes ``dest``; a directory's contents are merged into ``dest``. Returns the members left out.
    """
    with tarfile.open(archive) as tar:
        first = tar.next()
        if first is None:
            raise FileNotFoundError(f"the sandbox sent an empty archive for {dest.name}")
        parts = [p for p in first.name.split("/") if p not in ("", ".")]
        return extract_tar(tar, Path(dest), top=parts[0] if parts else None)
