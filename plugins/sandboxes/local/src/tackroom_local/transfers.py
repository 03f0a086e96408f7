"""Files in and out of the local sandbox: ``upload``/``download`` through the fd-safe view of its root
(:mod:`tackroom_local.view`), never letting the kernel follow a link the agent made."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import posixpath
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tackroom import SandboxError, SandboxExhaustedError, SandboxPathError, SandboxTimeoutError, TaskError
from tackroom_local.namespaces import Namespaces
from tackroom_local.view import O_READ, Deadline, Walk


def sandbox_parts(path: str, workdir: str) -> list[str]:
    """The names of ``path`` (relative ones from ``workdir``) as the sandbox sees it; ``..`` is refused."""
    if not isinstance(path, str) or not path or "\x00" in path:
        raise SandboxPathError(f"invalid sandbox path {path!r}")
    if not path.startswith("/"):
        path = posixpath.join(workdir, path)
    if ".." in path.split("/"):
        raise SandboxPathError(f"path {path!r} contains '..'; use a path without parent references")
    return [p for p in posixpath.normpath(path).split("/") if p]


class ViewTransfers:
    """Uploads and downloads through the sandbox's view (:attr:`Namespaces.view`); relative paths start at the
    ``workdir`` each call is given. :meth:`put` and :meth:`get` do the work on the host, in a thread."""

    def __init__(self, ns: Namespaces, storage_mb: int | None) -> None:
        self.ns, self.storage_mb = ns, storage_mb

    @contextlib.contextmanager
    def walk(self, path: str, timeout: float) -> Iterator[Walk]:
        """A :class:`~tackroom_local.view.Walk` of the sandbox's view for ``path`` (named in its errors), its fds closed
        at the end and its deadline, ``timeout`` seconds from now, raised as :class:`SandboxTimeoutError`."""
        assert self.ns.view is not None
        walk = Walk(self.ns.view, path, time.monotonic() + timeout, self.ns.uid)
        try:
            yield walk
        except Deadline:
            raise SandboxTimeoutError(f"transfer of {path} took longer than {timeout}s") from None
        finally:
            walk.close()

    def is_dir(self, path: str, workdir: str) -> bool:
        """Whether ``path`` is a folder as the sandbox sees it (Docker's COPY puts a file into one)."""
        with self.walk(path, 60) as walk:
            try:
                return walk.locate(sandbox_parts(path, workdir)).kind == "dir"
            except (OSError, SandboxPathError):
                return False

    def ensure_dir(self, path: str, workdir: str) -> None:
        """A folder at ``path``, made as needed (as an upload's parents are)."""
        with self.walk(path, 60) as walk:
            walk.ensure_dir(sandbox_parts(path, workdir), replace_last=False)

    def put(self, source: Path, dest: str, workdir: str, timeout: float) -> None:
        """Copy the host's ``source`` (a file or folder) to ``dest`` in the sandbox, replacing what is there."""
        parts = sandbox_parts(dest, workdir)
        with self.walk(dest, timeout) as walk:
            if source.is_dir():
                walk.put_tree(walk.ensure_dir(parts, replace_last=True), str(source))
            else:
                if not parts:
                    raise SandboxPathError(f"cannot upload a file to {dest!r}")
                walk.put_file(walk.ensure_dir(parts[:-1], replace_last=False), parts[-1], str(source))

    def get(self, source: str, dest: Path, workdir: str, timeout: float) -> None:
        """Copy ``source`` (a regular file or folder in the sandbox) to the host's ``dest``."""
        parts = sandbox_parts(source, workdir)
        dest = Path(os.path.abspath(dest))
        with self.walk(source, timeout) as walk:
            found = walk.locate(parts)
            if found.kind == "missing":
                raise FileNotFoundError(errno.ENOENT, "no such file or directory in the sandbox", source)
            if found.kind == "dir":
                if found.here.fd is None:
                    raise SandboxPathError(f"{source!r} is not a folder that can be downloaded (the writable roots, /usr "
                                           "and the folders bound into /etc can)")
                if dest.exists() and not dest.is_dir():
                    raise NotADirectoryError(errno.ENOTDIR, "cannot download a folder over a file", str(dest))
                dest.mkdir(parents=True, exist_ok=True)
                host = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    walk.get_tree(found.here.fd, host, 0)
                finally:
                    os.close(host)
                return
            if found.kind == "host_file":
                fd = os.open(found.host, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            else:
                assert found.st is not None and found.here.fd is not None
                if not stat.S_ISREG(found.st.st_mode):
                    raise SandboxPathError(f"{source!r} is a {_kind(found.st.st_mode)}; only regular files and folders "
                                           "are downloaded")
                try:
                    fd = os.open(found.name, O_READ, dir_fd=found.here.fd)
                except OSError as exc:
                    raise SandboxPathError(f"{source!r} changed during the download") from exc
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise SandboxPathError(f"{source!r} is a {_kind(st.st_mode)}; only regular files and folders are "
                                           "downloaded")
                if dest.is_dir() and not dest.is_symlink():
                    raise IsADirectoryError(errno.EISDIR, "cannot download a file over a folder", str(dest))
                dest.parent.mkdir(parents=True, exist_ok=True)
                parent = os.open(dest.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    walk.host_put(fd, st, parent, dest.name)
                finally:
                    os.close(parent)
            finally:
                os.close(fd)

    async def _transfer(self, what: str, fn: Callable[..., None], *args: object, timeout: float) -> None:
        await self.ns.wait_ready(timeout)
        self.ns.alive()
        try:
            await asyncio.wait_for(asyncio.to_thread(fn, *args, timeout), timeout + 5)
        except TimeoutError as exc:
            raise SandboxTimeoutError(f"{what} took longer than {timeout}s") from exc
        except (SandboxError, FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT) and self.storage_mb is not None:
                raise self._disk_full(what, exc) from exc
            raise SandboxError(f"{what} failed: {exc}") from exc

    def _disk_full(self, what: str, exc: OSError) -> Exception:
        """The sandbox's disk (``storage_mb``) is full: after the agent's turn, its doing (reward 0); before it, the
        task's files do not fit."""
        if self.ns.agent_done:
            return SandboxExhaustedError(f"the agent filled the sandbox's disk (storage_mb = {self.storage_mb}), so "
                                         f"{what} failed ({exc.strerror}); graded 0")
        return TaskError(f"{what} does not fit in the task's storage_mb = {self.storage_mb} ({exc.strerror}); "
                         "raise storage_mb in task.toml")

    async def upload(self, source: Path, dest: str, *, workdir: str, timeout: float) -> None:
        source = Path(source)
        if not source.exists():
            raise FileNotFoundError(str(source))
        await self._transfer(f"upload of {source} to {dest}", self.put, source, dest, workdir, timeout=timeout)

    async def download(self, source: str, dest: Path, *, workdir: str, timeout: float) -> None:
        await self._transfer(f"download of {source}", self.get, source, Path(dest), workdir, timeout=timeout)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISLNK, "symlink"), (stat.S_ISDIR, "folder")):  # fmt: skip
        if test(mode):
            return name
    return "special file"

