"""``upload``/``download`` for sandboxes whose provider moves only whole files (Modal, Daytona, …).

A directory travels as one tar archive staged under ``/tmp`` in the sandbox and
unpacked (or packed) there with ``tar``; a single file travels as itself. The
sandbox class supplies ``_put(data, remote, timeout)``, ``_get(remote, timeout)``
and ``_resolve(path)`` (a sandbox path made absolute) besides ``exec``. Before
each transfer :data:`CHECK_TRANSFER_PATH` runs inside the sandbox: nothing the
agent planted there (a link above the destination, a link or FIFO at it) is
followed; the same script guards the docker sandbox's ``docker cp``.

Archives that come out of a sandbox are the agent's work, so the host side never
trusts them: :func:`extract_tar` and :func:`write_file_safely` write only below
the named destination and never through a link (see :func:`extract_tar`). They
do not rely on tarfile's ``data`` filter, which older CPython 3.12 releases let
links slip past.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import posixpath
import secrets
import shlex
import shutil
import tarfile
from pathlib import Path
from typing import IO, Any

from tackroom import SandboxError, SandboxPathError

# -- sandbox-side checks before a transfer ------------------------------------------------------------

CHECK_TRANSFER_PATH = r"""
mode=$1; target=$2; cur=; rest=${target#/}
while [ -n "$rest" ]; do
    case $rest in */*) c=${rest%%/*}; rest=${rest#*/} ;; *) c=$rest; rest= ;; esac
    cur=$cur/$c
    if [ -L "$cur" ]; then
        if [ "$mode" != down ] && [ -z "$rest" ]; then rm -f -- "$cur" || exit 5; exit 0; fi
        printf 'link %s\n' "$cur"; exit 3
    fi
    [ -e "$cur" ] || exit 0
    if [ -n "$rest" ] && [ ! -d "$cur" ]; then printf 'notdir %s\n' "$cur"; exit 4; fi
done
if [ -d "$target" ] && [ "$mode" = dir ]; then
    while IFS= read -r rel; do
        d=$target/$rel
        if [ -L "$d" ] || { [ -e "$d" ] && [ ! -d "$d" ]; }; then rm -f -- "$d" || exit 5; fi
    done
    exit 0
fi
if [ -d "$target" ]; then [ "$mode" = file ] && exit 6; exit 0; fi
if [ -f "$target" ]; then [ "$mode" = dir ] && exit 7; exit 0; fi
if [ -e "$target" ]; then
    if [ "$mode" = down ]; then printf 'special %s\n' "$target"; exit 3; fi
    rm -f -- "$target" || exit 5
fi
exit 0
"""
"""Run (``sh -c``) inside the sandbox as root before a transfer; args: ``file`` | ``dir`` (an upload of one) or
``down``, then the absolute path. Every existing component above the path must be a real directory, not a link;
an upload replaces a link or special file at the path itself, a download refuses one. A directory upload reads
the directories of its tree (relative, parents first, one a line; see :func:`upload_directories`) on stdin and
replaces what is not a directory at their places. Exit 3: a link or special file; 4: a component that is not a
directory; 5: could not remove; 6: a file upload over a directory; 7: a directory upload over a file.
Interpret the outcome with :func:`transfer_check_error`."""


def upload_directories(root: Path) -> list[str]:
    """The directories below ``root``, relative, parents first: the ``tree`` a directory upload checks."""
    found = []
    for here, dirs, _ in os.walk(root):
        dirs.sort()
        found += [os.path.relpath(os.path.join(here, d), root) for d in dirs if not os.path.islink(os.path.join(here, d))]
    return found


def transfer_check_stdin(tree: list[str] | None) -> bytes:
    """What :data:`CHECK_TRANSFER_PATH` reads on stdin for a directory upload: the ``tree``, one a line."""
    return "".join(f"{rel}\n" for rel in tree or [] if "\n" not in rel).encode()


def transfer_check_error(code: int, said: str, path: str) -> BaseException | None:
    """What :data:`CHECK_TRANSFER_PATH`'s exit ``code`` and output mean for a transfer of ``path``: None (go on),
    :class:`SandboxPathError` (with ``culprit``: the sandbox path at fault), ``IsADirectoryError``,
    ``NotADirectoryError``, or a :class:`SandboxError` for anything else (the check itself failed)."""
    if code == 0:
        return None
    if code in (3, 4):
        kind, _, culprit = said.strip().partition(" ")
        if kind == "link":
            error = SandboxPathError(f"{path}: {culprit} is a symbolic link in the sandbox; transfers do not follow "
                                     "links (name the real path, or remove the link)")
        elif kind == "special":
            error = SandboxPathError(f"{path} is not a regular file or directory; it is not downloaded")
        else:
            error = SandboxPathError(f"{path}: {culprit} is not a directory")
        error.culprit = culprit  # type: ignore[attr-defined]
        return error
    if code == 6:
        return IsADirectoryError(f"{path} is a directory in the sandbox; cannot upload a file over it")
    if code == 7:
        return NotADirectoryError(f"{path} is a file in the sandbox; cannot upload a directory over it")
    return SandboxError(f"could not check {path} before a transfer (exit {code}): {said.strip()[:300]}")


class TarTransfer:
    """Mix into a :class:`tackroom.Sandbox` before it: ``class MySandbox(TarTransfer, Sandbox)``.

    No stand-ins for ``_put``/``_get``/``_resolve``/``exec`` here: a concrete one would hide a missing
    ``exec`` from the ``Sandbox`` ABC.
    """

    _put: Any
    _get: Any
    _resolve: Any
    exec: Any

    async def _check_transfer_path(self, mode: str, path: str, timeout: float, tree: list[str] | None = None) -> None:
        """Run :data:`CHECK_TRANSFER_PATH` in the sandbox (exec runs as its root) and raise what it found."""
        stdin = transfer_check_stdin(tree) if mode == "dir" else None
        r = await self.exec(["sh", "-c", CHECK_TRANSFER_PATH, "check", mode, path], timeout=timeout, stdin=stdin)
        error = transfer_check_error(r.exit_code, r.stdout.strip() or r.stderr, path)
        if error is not None:
            raise error

    async def upload(self, source: Path, dest: str, *, timeout: float = 120.0) -> None:
        target = self._resolve(dest)
        if not source.exists():
            raise FileNotFoundError(source)
        if source.is_dir():
            await self._check_transfer_path("dir", target, timeout, upload_directories(source))
        else:
            await self._check_transfer_path("file", target, timeout)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            if source.is_dir():
                for child in sorted(source.iterdir()):
                    tar.add(child, arcname=child.name)
                extract_to = target
            else:
                tar.add(source, arcname=posixpath.basename(target))
                extract_to = posixpath.dirname(target)
        staged = f"/tmp/.tackroom-up-{secrets.token_hex(6)}.tar"
        await self._put(buf.getvalue(), staged, timeout)
        r = await self.exec(
            f"mkdir -p {shlex.quote(extract_to)} && tar --no-same-owner -xf {staged} -C {shlex.quote(extract_to)}; s=$?; rm -f {staged}; exit $s",
            timeout=timeout,
        )
        if not r.ok:
            raise SandboxError(f"upload to {target} failed: {r.stderr.strip()}")

    async def download(self, source: str, dest: Path, *, timeout: float = 120.0) -> None:
        path = self._resolve(source)
        await self._check_transfer_path("down", path, timeout)
        staged = f"/tmp/.tackroom-down-{secrets.token_hex(6)}.tar"
        q = shlex.quote(path)
        r = await self.exec(
            f"if [ -d {q} ]; then tar -cf {staged} -C {q} . && echo dir; elif [ -e {q} ]; then echo file; else echo missing; fi",
            timeout=timeout,
        )
        kind = r.stdout.strip()
        if kind == "missing":
            raise FileNotFoundError(f"{source} does not exist in the sandbox")
        if kind == "file":
            data = await self._get(path, timeout)
            write_file_safely(Path(dest), io.BytesIO(data))
            return
        if kind != "dir":
            raise SandboxError(f"download of {source} failed: {r.stderr.strip() or r.stdout.strip()}")
        try:
            data = await self._get(staged, timeout)
        finally:
            await self.exec(f"rm -f {staged}", timeout=30)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            extract_tar(tar, Path(dest))


# -- host-side writing of what a sandbox sent --------------------------------------------------------

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _member_parts(name: str, top: str | None) -> tuple[str, ...]:
    """The path of a member below the destination; absolute names and ``..`` raise :class:`SandboxPathError`."""
    if "\x00" in name or name.startswith("/"):
        raise SandboxPathError(f"refusing to unpack {name!r}: an absolute path")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts:
        raise SandboxPathError(f"refusing to unpack {name!r}: it contains '..'")
    if top is not None:
        if not parts or parts[0] != top:
            raise SandboxPathError(f"refusing to unpack {name!r}: it is outside {top!r}, the entry downloaded")
        parts = parts[1:]
    return parts


def _link_is_contained(target: str) -> bool:
    """A symlink kept on the host: relative and without ``..``, so it resolves at or below its own directory."""
    return bool(target) and "\x00" not in target and not target.startswith("/") and ".." not in target.split("/")


def open_host_dir(parent: int, name: str) -> int:
    """Open the real directory ``name`` under ``parent``, creating it; a link, file or special file there is
    replaced (a link is removed, never followed). Retried when something swaps the entry in between."""
    for _ in range(10):
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            os.unlink(name, dir_fd=parent)
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=parent)
    raise SandboxError(f"could not make folder {name!r} for a download")


def _place(parent: int, name: str, make: Any) -> None:
    """Create an entry under a temporary name with ``make(tmp)``, then rename it over ``name`` (never through it).

    Raises :class:`IsADirectoryError` when ``name`` is a directory (it is not replaced).
    """
    tmp = f".tackroom-{secrets.token_hex(6)}"
    try:
        make(tmp)
        try:
            os.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
        except IsADirectoryError:
            raise IsADirectoryError(f"{name!r} is a directory on the host; a download does not replace it") from None
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=parent)
        except OSError:
            pass
        raise


def _write_into(parent: int, name: str, src: IO[bytes], mode: int = 0o644, mtime: float | None = None) -> None:
    def make(tmp: str) -> None:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent)
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
            os.fchmod(out.fileno(), (mode & 0o755) | 0o600)  # no setuid/setgid/sticky, no group/other write
            if mtime is not None:
                os.utime(out.fileno(), (mtime, mtime))

    _place(parent, name, make)


def write_file_safely(dest: Path, src: IO[bytes], *, mode: int = 0o644, mtime: float | None = None) -> None:
    """Write ``src`` to ``dest`` (parents created): a link or special file at ``dest`` is replaced, never followed.

    Raises :class:`IsADirectoryError` when ``dest`` is a directory.
    """
    dest = Path(dest).absolute()
    dest.parent.mkdir(parents=True, exist_ok=True)
    parent = os.open(dest.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _write_into(parent, dest.name, src, mode, mtime)
    finally:
        os.close(parent)


def extract_tar(tar: tarfile.TarFile, dest: Path, *, top: str | None = None) -> list[str]:
    """Unpack ``tar`` into the directory ``dest`` (created; existing contents are merged); return the names left out.

    Every member lands below ``dest``, and nothing is written through a link: a member's parent that is a
    link (or a file) on the host is replaced by a directory, a file or link replaces what is at its place.
    Absolute names and ``..`` raise :class:`SandboxPathError` before anything is written. Regular files
    keep their executable bits (setuid/setgid/sticky and group/other write are dropped); a hard link becomes
    a copy of the member it names; a symlink is kept only when relative and free of ``..`` (so it resolves
    below its own directory), else left out, like devices, FIFOs and sockets.

    With ``top`` (a ``docker cp`` archive: one entry named after the source), members must lie under
    ``top`` and ``top``'s contents land in ``dest``. A file ``top`` is written to ``dest`` itself; a ``top``
    that is a link or special file raises :class:`SandboxPathError`.
    """
    dest = Path(dest).absolute()
    members = tar.getmembers()
    parts = [_member_parts(m.name, top) for m in members]  # every name is checked before anything is written
    if top is not None and members and not parts[0] and not members[0].isdir():
        first = members[0]
        if not first.isreg():
            raise SandboxPathError(f"{top!r} is a {_kind(first)}, not a regular file or directory; it is not downloaded")
        src = tar.extractfile(first)
        assert src is not None
        write_file_safely(dest, src, mode=first.mode, mtime=first.mtime)
        return []
    dest.mkdir(parents=True, exist_ok=True)
    root = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    dirs: dict[tuple[str, ...], int] = {(): root}

    def open_dirs(path: tuple[str, ...]) -> int:
        if path not in dirs:
            if len(dirs) > 256:  # a wide tree: drop the handles (reopening never follows a link either)
                for key in [k for k in dirs if k]:
                    os.close(dirs.pop(key))
            dirs[path] = open_host_dir(open_dirs(path[:-1]), path[-1])
        return dirs[path]

    files: dict[tuple[str, ...], tarfile.TarInfo] = {}
    skipped: list[str] = []
    try:
        for member, path in zip(members, parts, strict=True):
            if member.isdir():
                open_dirs(path)
                continue
            if not path:
                raise SandboxPathError(f"refusing to unpack {member.name!r} over the destination directory itself")
            if member.islnk():
                try:
                    original = files.get(_member_parts(member.linkname, top))
                except SandboxPathError:
                    original = None
                if original is None:
                    skipped.append(member.name)
                    continue
                member_src, mode, mtime = tar.extractfile(original), original.mode, original.mtime
            elif member.isreg():
                member_src, mode, mtime = tar.extractfile(member), member.mode, member.mtime
            elif member.issym() and _link_is_contained(member.linkname):
                parent = open_dirs(path[:-1])
                target = member.linkname
                _place(parent, path[-1], lambda tmp, target=target, parent=parent: os.symlink(target, tmp, dir_fd=parent))
                continue
            else:
                skipped.append(member.name)
                continue
            assert member_src is not None
            _write_into(open_dirs(path[:-1]), path[-1], member_src, mode, mtime)
            files[path] = member if member.isreg() else original
    finally:
        for fd in dirs.values():
            os.close(fd)
    return skipped


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym() or member.islnk():
        return "link"
    if member.isfifo():
        return "FIFO"
    if member.ischr() or member.isblk():
        return "device"
    return "special file"
