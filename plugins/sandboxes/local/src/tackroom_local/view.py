"""The local sandbox's file view: the tree bwrap mounts (binds, links, bwrap's own dirs) and transfers
through it that resolve sandbox paths with dir fds and O_NOFOLLOW, links as the sandbox sees them."""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import secrets
import shutil
import stat
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tackroom import SandboxError, SandboxPathError
from tackroom_sandbox_kit import open_host_dir

WRITABLE_ROOTS = ("app", "logs", "tests", "solution", "tmp", "root", "home", "workspace", "data", "output", "srv", "opt")
GRADER_DIR = "/.tackroom-grader"
"""An empty folder of bwrap's read-only root, where each grader's private tmpfs is mounted (tackroom_local.grading)."""
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ETC_FILES = (
    "passwd", "group", "hosts", "host.conf", "resolv.conf", "nsswitch.conf", "gai.conf",
    "networks", "protocols", "services", "rpc", "ethertypes",
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
    "alternatives", "ssl/certs", "ssl/openssl.cnf", "ca-certificates", "ca-certificates.conf",
    "pki/tls/certs", "pki/ca-trust/extracted",
    "localtime", "timezone", "locale.alias", "locale.conf", "default/locale",
    "bash.bashrc", "profile", "inputrc", "shells", "terminfo", "skel", "login.defs",
    "magic", "magic.mime", "mime.types", "mailcap",
    "debian_version", "os-release", "lsb-release", "issue", "redhat-release", "alpine-release", "system-release",
    "python3", "python3.*", "perl", "java-*", "fonts", "vim", "xdg", "manpath.config",
)  # fmt: skip
"""What of the host's /etc the sandbox sees (read-only): what shells and common tools read. Never
shadow, gshadow, sudoers, ssh/, ssl/private, pip.conf, npmrc, environment, profile.d/ (where hosts keep
exported credentials) or anything else that may hold secrets."""
ETC_LINKS = {"mtab": "/proc/self/mounts"}
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
O_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_O_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20
_MAX_LINKS = 40
INSTALL_HINT = (
    "Install it with `apt-get install bubblewrap util-linux` (Debian/Ubuntu) or `dnf install bubblewrap util-linux`, "
    "or select another sandbox (e.g. --sandbox docker)"
)


@dataclass(frozen=True)
class _Bind:
    host: str
    writable: bool = False


@dataclass(frozen=True)
class _Link:
    target: str


@dataclass(frozen=True)
class _Opaque:
    """A mount that transfers never reach (/proc, /dev)."""


@dataclass
class Dir:
    """A directory of bwrap's own (read-only tmpfs) root: its entries are binds, links or more of these."""

    children: dict[str, _Bind | _Link | _Opaque | Dir] = field(default_factory=dict)


def build_view(root: Path, mounts: dict[str, Path] | None = None) -> Dir:
    """What the sandbox sees at ``/``; bwrap's mounts and the transfers are both made from it. ``mounts``: the
    spec's read-only host folders, by sandbox path (:func:`add_mount`)."""
    top = Dir()
    for name in WRITABLE_ROOTS:
        top.children[name] = _Bind(str(root / name), writable=True)
    top.children["usr"] = _Bind("/usr")
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = f"/{name}"
        if os.path.islink(host):
            top.children[name] = _Link(os.readlink(host))
        elif os.path.isdir(host):
            top.children[name] = _Bind(host)
    etc = Dir()
    for pattern in ETC_FILES:
        for host in sorted(glob.glob(f"/etc/{pattern}")):
            real = os.path.realpath(host)
            if not os.path.exists(real):
                continue
            *parents, leaf = host[len("/etc/") :].split("/")
            node = etc
            for p in parents:
                child = node.children.setdefault(p, Dir())
                if not isinstance(child, Dir):
                    break
                node = child
            else:
                node.children[leaf] = _Bind(real)
    for name, target in ETC_LINKS.items():
        etc.children[name] = _Link(target)
    top.children["etc"] = etc
    top.children["proc"] = _Opaque()
    top.children["dev"] = _Opaque()
    for path, host in (mounts or {}).items():
        add_mount(top, path, host)
    return top


def add_mount(top: Dir, path: str, host: Path) -> None:
    """The host folder ``host`` bound read-only at ``path`` (``SandboxSpec.mounts``), in folders of bwrap's own
    read-only root: never inside a writable root, ``/usr`` or another bind (a folder the agent could rename), and
    never over what is there. Links in it resolve inside the sandbox, as every bind's do."""
    *parents, leaf = path.strip("/").split("/")
    node = top
    for depth, name in enumerate(parents, 1):
        child = node.children.setdefault(name, Dir())
        if not isinstance(child, Dir):
            raise SandboxPathError(f"mount {path!r} lies inside /{'/'.join(parents[:depth])}, which the local sandbox "
                                   "binds or links; mount under a folder of its own (e.g. /mnt/...)")
        node = child
    if leaf in node.children:
        raise SandboxPathError(f"mount {path!r} would cover what the local sandbox already has there")
    if not host.is_dir():
        raise SandboxPathError(f"mount {path!r}: the host folder {host} does not exist (or is not a folder)")
    node.children[leaf] = _Bind(str(host))


def mount_args(node: Dir, remap: dict[str, str], prefix: str = "") -> list[str]:
    """bwrap's arguments for ``node``; ``remap`` replaces host path prefixes (the staged per-trial root)."""
    args: list[str] = []
    for name, child in node.children.items():
        dest = f"{prefix}/{name}"
        if isinstance(child, _Bind):
            host = child.host
            for old, new in remap.items():
                if host == old or host.startswith(old + "/"):
                    host = new + host[len(old) :]
            args += ["--bind" if child.writable else "--ro-bind", host, dest]
        elif isinstance(child, _Link):
            args += ["--symlink", child.target, dest]
        elif isinstance(child, Dir):
            args += ["--dir", dest, *mount_args(child, remap, dest)]
    return args


def inside_path(name: str, view: Dir) -> str:
    """The absolute path of a host tool as the sandbox sees it, which must lie in a read-only bind (/usr):
    ``nsenter`` starts it with every capability of the sandbox's user namespace, so a PATH lookup could run
    a binary the agent planted in a writable root."""
    found = shutil.which(name, path=DEFAULT_PATH)
    real = os.path.realpath(found) if found else ""
    entry = view.children.get(real.split("/")[1]) if real.count("/") > 1 else None
    if not isinstance(entry, _Bind) or entry.writable:
        raise SandboxError(f"{name!r} must be installed under /usr (found {found or 'nothing'}): the local sandbox runs it "
                           f"inside the sandbox by its absolute path. {INSTALL_HINT}")
    return real


def searchable_by_all(path: Path) -> bool:
    """Whether every folder down to ``path`` lets any uid through (bwrap runs as the sandbox's uid)."""
    try:
        return all(os.stat(p).st_mode & stat.S_IXOTH for p in (path, *path.parents))
    except OSError:
        return False


class Deadline(Exception):
    pass


@dataclass
class Here:
    """A directory of the view: a real one (``fd``) or one of bwrap's own (``node``)."""

    parts: tuple[str, ...]
    fd: int | None = None
    node: Dir | None = None
    writable: bool = False


@dataclass
class Found:
    """Where :meth:`Walk.locate` ended: a folder (``here``), an entry of one (``name``, ``st``), a file bound from the
    host (``host``) or a missing last name."""

    kind: Literal["dir", "entry", "host_file", "missing"]
    here: Here
    name: str = ""
    st: os.stat_result | None = None
    host: str = ""


class Walk:
    """One transfer: resolves sandbox paths with dir fds and O_NOFOLLOW, links as the sandbox sees them."""

    def __init__(self, view: Dir, path: str, deadline: float, uid: int | None) -> None:
        self.view, self.path, self.deadline, self.uid = view, path, deadline, uid
        self.fds: list[int] = []
        self.links = 0
        self.steps = 0
        self.retries = 0

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()

    def tick(self) -> None:
        self.steps += 1
        if time.monotonic() > self.deadline:
            raise Deadline

    def retry(self) -> None:
        """Something changed under the walk (a folder swapped for a link): look again, a bounded number of times."""
        self.retries += 1
        if self.retries > 1000:
            raise SandboxError(f"{self.path!r} kept changing during the transfer")

    def _open(self, name: str, dir_fd: int | None) -> int:
        fd = os.open(name, _O_DIR if dir_fd is not None else os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
        self.fds.append(fd)
        return fd

    def _follow(self, target: str, here: Here, todo: deque[str]) -> Here:
        self.links += 1
        if self.links > _MAX_LINKS:
            raise SandboxPathError(f"{self.path!r}: too many levels of symbolic links")
        todo.extendleft(reversed(target.split("/")))
        return Here((), node=self.view) if target.startswith("/") else here

    def _reopen(self, parts: tuple[str, ...]) -> Here:
        found = self.locate(list(parts))
        if found.kind != "dir":
            raise FileNotFoundError(errno.ENOENT, "a parent folder changed during the transfer", self.path)
        return found.here

    def _next_name(self, todo: deque[str], here: Here) -> tuple[str | None, Here]:
        """The next name to step into and where from (``""`` and ``.`` skipped, ``..`` taken); None at the end."""
        while todo:
            self.tick()
            name = todo.popleft()
            if name == "..":
                here = self._reopen(here.parts[:-1])
            elif name not in ("", "."):
                return name, here
        return None, here

    def locate(self, parts: Sequence[str], follow_last: bool = True) -> Found:
        """Find ``parts`` as the sandbox would; the kernel never follows a link on the way."""
        todo: deque[str] = deque(parts)
        here = Here((), node=self.view)
        while True:
            name, here = self._next_name(todo, here)
            if name is None:
                break
            last = not todo
            if here.fd is None:
                assert here.node is not None
                child = here.node.children.get(name)
                if child is None:
                    if last:
                        return Found("missing", here, name)
                    raise FileNotFoundError(errno.ENOENT, "no such file or directory in the sandbox", self.path)
                if isinstance(child, _Opaque):
                    raise SandboxPathError(f"{self.path!r} is under /{name}, which files are never copied to or from")
                if isinstance(child, _Link):
                    here = self._follow(child.target, here, todo)
                elif isinstance(child, Dir):
                    here = Here((*here.parts, name), node=child)
                else:
                    st = os.stat(child.host)
                    if stat.S_ISDIR(st.st_mode):
                        here = Here((*here.parts, name), fd=self._open(child.host, None), writable=child.writable)
                    elif last:
                        return Found("host_file", here, name, st=st, host=child.host)
                    else:
                        raise FileNotFoundError(errno.ENOTDIR, "not a directory in the sandbox", self.path)
                continue
            try:
                st = os.stat(name, dir_fd=here.fd, follow_symlinks=False)
            except FileNotFoundError:
                if last:
                    return Found("missing", here, name)
                raise FileNotFoundError(errno.ENOENT, "no such file or directory in the sandbox", self.path) from None
            if stat.S_ISLNK(st.st_mode) and (follow_last or not last):
                here = self._follow(os.readlink(name, dir_fd=here.fd), here, todo)
            elif stat.S_ISDIR(st.st_mode):
                try:
                    fd = self._open(name, here.fd)
                except OSError as exc:  # swapped for a link or removed since the stat: look again
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                        raise
                    self.retry()
                    todo.appendleft(name)
                    continue
                here = Here((*here.parts, name), fd=fd, writable=here.writable)
            elif last:
                return Found("entry", here, name, st=st)
            else:
                raise FileNotFoundError(errno.ENOTDIR, "not a directory in the sandbox", self.path)
        return Found("dir", here)

    def real_folder(self, parts: Sequence[str]) -> Here | None:
        """The real folder at ``parts`` in a writable root, reached without following any link: None when something
        on the way is missing, a link or not a folder. Reads what is there, never resolves it."""
        child = self.view.children.get(parts[0]) if parts else None
        if not isinstance(child, _Bind) or not child.writable:
            return None
        here = Here((parts[0],), fd=self._open(child.host, None), writable=True)
        for name in parts[1:]:
            self.tick()
            if name in ("", ".", ".."):
                return None
            try:
                fd = self._open(name, here.fd)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                    return None
                raise
            here = Here((*here.parts, name), fd=fd, writable=True)
        return here

    # -- writing --------------------------------------------------------------------
    def _chown(self, name: str, dir_fd: int) -> None:
        if self.uid is not None:
            os.chown(name, self.uid, self.uid, dir_fd=dir_fd, follow_symlinks=False)

    def remove(self, here: Here, name: str) -> None:
        """Remove ``name`` from the real folder ``here``: a folder with what it holds, else the entry itself (a link,
        never its target)."""
        assert here.fd is not None
        try:
            st = os.stat(name, dir_fd=here.fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(name, dir_fd=here.fd)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=here.fd)

    def _mkdir(self, here: Here, name: str, mode: int = 0o755) -> None:
        assert here.fd is not None
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, mode, dir_fd=here.fd)
            self._chown(name, here.fd)

    def ensure_dir(self, parts: Sequence[str], *, replace_last: bool, replace_links: bool = False) -> Here:
        """A writable real directory at ``parts``, created as needed.

        A link among the parents is followed when it leads to a directory in the writable roots, else it
        (like a file, fifo or socket there) is replaced by a directory; with ``replace_last`` a link at
        ``parts`` itself is replaced, never followed; with ``replace_links`` every link on the way is (what was a
        real folder is one again: :mod:`~tackroom_local.installed` puts files back where they were).
        """
        todo: deque[str] = deque(parts)
        here = Here((), node=self.view)
        while True:
            name, here = self._next_name(todo, here)
            if name is None:
                break
            last = not todo
            if here.fd is None:
                assert here.node is not None
                child = here.node.children.get(name)
                if isinstance(child, _Link):
                    here = self._follow(child.target, here, todo)
                    continue
                if isinstance(child, _Bind) and child.writable:
                    here = Here((*here.parts, name), fd=self._open(child.host, None), writable=True)
                    continue
                allowed = ", ".join(f"/{r}" for r in WRITABLE_ROOTS)
                raise SandboxPathError(f"{self.path!r} is outside the local sandbox's writable roots ({allowed})")
            if not here.writable:
                raise SandboxPathError(f"{self.path!r} leads into a read-only part of the local sandbox")
            try:
                st = os.stat(name, dir_fd=here.fd, follow_symlinks=False)
            except FileNotFoundError:
                self.retry()
                self._mkdir(here, name)
                todo.appendleft(name)
                continue
            if stat.S_ISDIR(st.st_mode):
                try:
                    fd = self._open(name, here.fd)
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                        raise
                    self.retry()
                    todo.appendleft(name)
                    continue
                here = Here((*here.parts, name), fd=fd, writable=True)
                continue
            if stat.S_ISLNK(st.st_mode) and not (last and replace_last) and not replace_links:
                target = os.readlink(name, dir_fd=here.fd)
                sub = [*target.split("/")] if target.startswith("/") else [*here.parts, *target.split("/")]
                with contextlib.suppress(OSError, SandboxPathError):
                    found = self.locate(sub)
                    if found.kind == "dir" and found.here.fd is not None and found.here.writable:
                        here = found.here
                        continue
            self.retry()
            self.remove(here, name)  # a dangling/escaping/read-only link, a file, a fifo, a socket
            todo.appendleft(name)
        if here.fd is None or not here.writable:
            raise SandboxPathError(f"{self.path!r} is not a writable folder of the local sandbox")
        return here

    def _replace(self, here: Here, tmp: str, name: str) -> None:
        assert here.fd is not None
        for _ in range(10):
            try:
                os.rename(tmp, name, src_dir_fd=here.fd, dst_dir_fd=here.fd)
                return
            except OSError as exc:
                if exc.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                    raise
                self.remove(here, name)
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=here.fd)
        raise SandboxError(f"{self.path!r} kept changing during the transfer")

    def _copy(self, src: int, dst: int) -> None:
        """Copy a regular file's data; its holes stay holes (a sparse file of any size costs only its data)."""
        size = os.fstat(src).st_size
        pos = 0
        while pos < size:
            try:
                start = os.lseek(src, pos, os.SEEK_DATA)
                end = os.lseek(src, start, os.SEEK_HOLE)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # nothing but a hole after pos
                    break
                start, end = pos, size  # no SEEK_DATA here: copy it all
            os.lseek(src, start, os.SEEK_SET)
            os.lseek(dst, start, os.SEEK_SET)
            self._copy_range(src, dst, end - start)
            pos = end
        os.ftruncate(dst, size)  # the size read first: a file still growing is copied as it was then

    def _copy_range(self, src: int, dst: int, count: int) -> None:
        while count > 0:
            chunk = os.read(src, min(_CHUNK, count))
            if not chunk:
                return
            if time.monotonic() > self.deadline:
                raise Deadline
            count -= len(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(dst, view) :]

    def put_file(self, here: Here, name: str, source: str) -> None:
        assert here.fd is not None
        if not name or name in (".", ".."):
            raise SandboxPathError(f"{self.path!r} is not a file path")
        st = os.stat(source)
        tmp = f".tackroom-upload-{secrets.token_hex(6)}"
        fd = os.open(tmp, _O_NEW, 0o600, dir_fd=here.fd)
        try:
            with open(source, "rb") as src:
                self._copy(src.fileno(), fd)
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & 0o1777)
            if self.uid is not None:
                os.fchown(fd, self.uid, self.uid)
            os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=here.fd)
            raise
        os.close(fd)
        self._replace(here, tmp, name)

    def put_link(self, here: Here, name: str, target: str) -> None:
        assert here.fd is not None
        tmp = f".tackroom-upload-{secrets.token_hex(6)}"
        os.symlink(target, tmp, dir_fd=here.fd)
        self._chown(tmp, here.fd)
        self._replace(here, tmp, name)

    def put_tree(self, here: Here, source: str) -> None:
        assert here.fd is not None
        with os.scandir(source) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            self.tick()
            if entry.is_symlink():
                self.put_link(here, entry.name, os.readlink(entry.path))
            elif entry.is_dir():
                mode = stat.S_IMODE(entry.stat().st_mode) & 0o1777
                sub = self._child_dir(here, entry.name, mode)
                try:
                    self.put_tree(sub, entry.path)
                finally:
                    assert sub.fd is not None
                    os.close(sub.fd)
            elif entry.is_file():
                self.put_file(here, entry.name, entry.path)

    def _child_dir(self, here: Here, name: str, mode: int) -> Here:
        """A real directory ``name`` in ``here`` (whatever else is there is replaced); its fd is the caller's."""
        assert here.fd is not None
        for _ in range(10):
            try:
                fd = os.open(name, _O_DIR, dir_fd=here.fd)
                return Here((*here.parts, name), fd=fd, writable=True)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                self.remove(here, name)
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=here.fd)
                fd = os.open(name, _O_DIR, dir_fd=here.fd)
                os.fchmod(fd, mode)
                if self.uid is not None:
                    os.fchown(fd, self.uid, self.uid)
                return Here((*here.parts, name), fd=fd, writable=True)
        raise SandboxError(f"{self.path!r} kept changing during the transfer")

    # -- reading --------------------------------------------------------------------
    def get_tree(self, src: int, dst: int, depth: int, *, links: bool = True) -> None:
        """Copy the folder ``src`` into the host folder ``dst``: folders and regular files; a link only when
        ``links`` and it stays inside the copy; never a special file."""
        with os.scandir(src) as it:
            names = sorted(e.name for e in it)
        for name in names:
            self.tick()
            try:
                st = os.stat(name, dir_fd=src, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                try:
                    sub = os.open(name, _O_DIR, dir_fd=src)
                except OSError:
                    continue  # swapped for something else meanwhile
                try:
                    host = open_host_dir(dst, name)
                    try:
                        self.get_tree(sub, host, depth + 1, links=links)
                    finally:
                        os.close(host)
                finally:
                    os.close(sub)
            elif stat.S_ISREG(st.st_mode):
                try:
                    fd = os.open(name, O_READ, dir_fd=src)
                except OSError:
                    continue
                try:
                    got = os.fstat(fd)
                    if stat.S_ISREG(got.st_mode):
                        self.host_put(fd, got, dst, name)
                finally:
                    os.close(fd)
            elif stat.S_ISLNK(st.st_mode) and links:
                target = os.readlink(name, dir_fd=src)
                if _link_stays_inside(target, depth):
                    tmp = f".tackroom-dl-{secrets.token_hex(6)}"
                    os.symlink(target, tmp, dir_fd=dst)
                    _host_replace(dst, tmp, name)
            # fifos, sockets and devices are never opened nor copied

    def host_put(self, src: int, st: os.stat_result, dst_dir: int, name: str) -> None:
        """Copy the open regular file ``src`` (``st``) to ``name`` in the host folder ``dst_dir``, via a temporary name."""
        tmp = f".tackroom-dl-{secrets.token_hex(6)}"
        fd = os.open(tmp, _O_NEW, 0o600, dir_fd=dst_dir)
        try:
            self._copy(src, fd)
            os.fchmod(fd, 0o755 if st.st_mode & 0o100 else 0o644)
            os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dst_dir)
            raise
        os.close(fd)
        _host_replace(dst_dir, tmp, name)


def _host_replace(dir_fd: int, tmp: str, name: str) -> None:
    try:
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
            raise
        shutil.rmtree(name, dir_fd=dir_fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def _link_stays_inside(target: str, depth: int) -> bool:
    """A relative target made of leading ``..`` (no more than ``depth``) then names cannot leave the download."""
    if not target or target.startswith("/"):
        return False
    parts = [p for p in target.split("/") if p not in ("", ".")]
    ups = 0
    while ups < len(parts) and parts[ups] == "..":
        ups += 1
    return ups <= depth and ".." not in parts[ups:]
