"""What the task's environment installed in the local sandbox's writable roots, kept on the host at start and put
back before grading (``restore_image_tools``).

The host's ``/usr`` is read-only, so the grader's tools an agent can change are the ones the task's Dockerfile
installed in a writable root: a virtualenv under ``/opt`` that ``test.sh`` runs, a script under ``/srv``, a tool in
``/root/.local/bin`` with ``ENV PATH=/root/.local/bin:$PATH``. :meth:`InstalledTools.record` runs right after the
Dockerfile (nothing runs it when the task has none) and reads the writable roots, but ``/tmp`` and the working
directory, never through a link:

- under a *tool root* (a folder of the task's ``PATH`` in a writable root, its parent for ``…/bin``, as docker's
  restore has it) every file and link;
- anywhere else, what runs: an executable file, a file named like a library, an interpreter module or a start-up
  file (:data:`TOOL_NAMES`), a link so named or in a ``bin``/``sbin`` folder.

Each file recorded is copied to a folder of the sandbox's beside its root (``<root>.installed``, out of the agent's
reach, removed with the sandbox), so the cost follows what the Dockerfile installed; every other path seen is
remembered by name only (what was not there, the agent added). Folders named ``.cache`` are skipped: the grader's
HOME is fresh, so its tools never read the agent's caches.

:meth:`InstalledTools.restore`, before grading, leaves every path under ``keep`` (the working directory,
``grading_paths``) as the agent made it and elsewhere:

- puts back each recorded file or link the agent changed (content, mode), replaced (a link, a folder, a fifo in its
  place, or a link for one of the folders above it) or deleted;
- removes what the agent added that would run instead of a recorded tool: a file in a writable folder of the task's
  ``PATH`` with the name of one in a later ``PATH`` folder (recorded, or the host's); in a site folder
  (``site-packages``, ``dist-packages``) seen at start, a start-up hook (:data:`HOOKS`: ``*.pth``,
  ``sitecustomize``, ``usercustomize``); beside a recorded ``x.py``, a package ``x/``, an extension ``x.*.so`` or a
  ``__pycache__/x.*.pyc`` (each is imported instead of it); in the folder of a recorded Python script (first on its
  ``sys.path``, before the standard library), any module (:data:`MODULES`) or package. Without a Dockerfile nothing
  is recorded, and the ``PATH`` rule still holds for a writable folder the task's env put on ``PATH``.

Reading and writing inside the root go through the sandbox's view (:class:`~tackroom_local.view.Walk`): what is
read is reached without following any link, what is written replaces whatever sits there (a link the agent made
included) by a temporary name and ``rename``, with the folders above it made real folders again, so a link the
agent planted never leads a write out of the root. A recorded file is unchanged when its inode and change time
(which no process can set) are the ones recorded, else when its mode and bytes are.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import posixpath
import re
import stat
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tackroom import GradingSabotagedError, SandboxError, SandboxExhaustedError, SandboxPathError
from tackroom_local.markers import rmtree
from tackroom_local.transfers import ViewTransfers
from tackroom_local.view import O_READ, WRITABLE_ROOTS, Here

TOOL_NAMES = ("*.so", "*.so.*", "*.py", "*.pyc", "*.pth", "*.pm", "*.pl", "*.rb", "*.js", "*.mjs", "*.cjs", "*.lua",
              "*.jar", "*.sh", "pyvenv.cfg")
"""Files recorded outside the tool roots though not executable: shared libraries, interpreter modules, scripts run
through an interpreter, a virtualenv's ``pyvenv.cfg`` (its ``home`` names the interpreter's standard library)."""
_TOOL_NAME = re.compile("|".join(fnmatch.translate(n) for n in TOOL_NAMES))
HOOKS = ("*.pth", "sitecustomize", "sitecustomize.*", "usercustomize", "usercustomize.*")
"""Names in a site folder that Python runs at start when they exist."""
MODULES = ("*.py", "*.pyc", "*.so")
SITE_FOLDERS = ("site-packages", "dist-packages")
SKIPPED_FOLDERS = (".cache",)
MAX_DEPTH = 64
TIMEOUT = 600.0
"""Seconds one folder's reading or writing may take (a walk's deadline)."""
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_O_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Installed:
    """One file or link the task's environment installed, as it was at start."""

    link: str | None
    """The target of a link; None for a regular file."""
    mode: int = 0
    size: int = 0
    stamp: tuple[int, int, int] = (0, 0, 0)
    """``st_dev``, ``st_ino``, ``st_ctime_ns``: the same three mean the file was not touched since."""
    copy: str = ""
    """The host copy's name in the record folder."""
    script: bool = False
    """A Python script (``#!`` naming python): its folder comes first on its ``sys.path``."""


def under(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots if r)


def split(path: str) -> list[str]:
    return [p for p in path.split("/") if p]


def writable(path: str) -> bool:
    """Whether ``path`` (absolute, normalized) lies in a writable root other than /tmp."""
    parts = split(path)
    return bool(parts) and parts[0] in WRITABLE_ROOTS and parts[0] != "tmp"


def path_folders(path_env: str) -> list[str]:
    """The absolute folders of a ``PATH``, normalized, in order."""
    return [posixpath.normpath(d) for d in path_env.split(":") if d.startswith("/") and ".." not in d.split("/")]


def tool_roots(path_env: str, skip: list[str]) -> list[str]:
    """The writable folders of ``path_env`` (the parent for ``…/bin``), leaving out those under ``skip``."""
    roots = []
    for d in path_folders(path_env):
        base = posixpath.dirname(d) if posixpath.basename(d) in ("bin", "sbin") else d
        if writable(base) and not under(base, skip) and not under(d, skip):
            roots.append(base)
    return list(dict.fromkeys(roots))


def copy_data(src: int, dst: int) -> None:
    """Copy what is left of ``src`` to ``dst`` (in the kernel where it can: a reflink on filesystems that have one)."""
    with contextlib.suppress(OSError):
        while os.copy_file_range(src, dst, 1 << 30):
            pass
        return
    while chunk := os.read(src, _CHUNK):
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst, view) :]


def same_bytes(a: int, b: int) -> bool:
    while True:
        x, y = os.read(a, _CHUNK), os.read(b, _CHUNK)
        if x != y:
            return False
        if not x:
            return True


class InstalledTools:
    """The record of one sandbox (see the module docstring): :meth:`record` at start, :meth:`restore` before grading,
    :meth:`discard` at stop. Works on the host, in a thread."""

    def __init__(self, transfers: ViewTransfers, folder: Path) -> None:
        self.transfers, self.folder = transfers, folder
        self.entries: dict[str, Installed] = {}
        """What was recorded, by sandbox path."""
        self.seen: set[str] = set()
        """Every path seen at start, folders included: what is not among them, the agent added."""
        self.sites: set[str] = set()
        """The site folders seen at start."""
        self._folder_fd: int | None = None
        self.copies = 0
        self.copied = 0
        """Files and bytes copied to the record folder."""

    # -- at start ----------------------------------------------------------------------------
    def record(self, path_env: str, skip: list[str]) -> None:
        """Record what the writable roots hold now, but under ``skip`` (the working directory) and /tmp."""
        skip = [*skip, "/tmp"]
        roots = tool_roots(path_env, skip)
        try:
            with self.transfers.walk("/", TIMEOUT) as walk:
                for name in WRITABLE_ROOTS:
                    if under(f"/{name}", skip):
                        continue
                    here = walk.real_folder([name])
                    if here is not None and here.fd is not None:
                        self._scan(here.fd, f"/{name}", roots, skip, 0)
        finally:
            if self._folder_fd is not None:
                os.close(self._folder_fd)
                self._folder_fd = None

    def _scan(self, fd: int, path: str, roots: list[str], skip: list[str], depth: int) -> None:
        with os.scandir(fd) as it:
            found = sorted(it, key=lambda e: e.name)
        for entry in found:
            p, name = f"{path}/{entry.name}", entry.name
            if under(p, skip):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            self.seen.add(p)
            tool = not stat.S_ISDIR(st.st_mode) and (under(p, roots) or _TOOL_NAME.match(name) is not None)
            if stat.S_ISDIR(st.st_mode):
                if name in SITE_FOLDERS:
                    self.sites.add(p)
                if depth >= MAX_DEPTH or name in SKIPPED_FOLDERS:
                    continue
                try:
                    sub = os.open(name, _O_DIR, dir_fd=fd)
                except OSError:
                    continue
                try:
                    self._scan(sub, p, roots, skip, depth + 1)
                finally:
                    os.close(sub)
            elif stat.S_ISLNK(st.st_mode) and (tool or posixpath.basename(path) in ("bin", "sbin")):
                self.entries[p] = Installed(os.readlink(name, dir_fd=fd))
            elif stat.S_ISREG(st.st_mode) and (tool or st.st_mode & 0o111):
                if kept := self._keep(fd, name):
                    self.entries[p] = kept

    def _keep(self, dir_fd: int, name: str) -> Installed | None:
        """Copy the regular file ``name`` of ``dir_fd`` to the record folder, with its mode and times."""
        try:
            src = os.open(name, O_READ, dir_fd=dir_fd)
        except OSError:
            return None
        try:
            st = os.fstat(src)
            if not stat.S_ISREG(st.st_mode):
                return None
            if self._folder_fd is None:
                self.folder.mkdir(mode=0o700, exist_ok=True)
                self._folder_fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            copy = str(self.copies)
            self.copies += 1
            dst = os.open(copy, _O_NEW, 0o600, dir_fd=self._folder_fd)
            try:
                copy_data(src, dst)
                os.fchmod(dst, stat.S_IMODE(st.st_mode) & 0o1777)
                os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
            finally:
                os.close(dst)
            head = os.pread(src, 256, 0).split(b"\n", 1)[0]
        finally:
            os.close(src)
        self.copied += st.st_size
        script = bool(st.st_mode & 0o111) and head.startswith(b"#!") and b"python" in head
        return Installed(None, stat.S_IMODE(st.st_mode) & 0o1777, st.st_size, (st.st_dev, st.st_ino, st.st_ctime_ns),
                         copy, script)

    # -- before grading ------------------------------------------------------------------------
    def idle(self, path_env: str) -> bool:
        """Whether :meth:`restore` has nothing to look at: nothing recorded, no writable folder on ``path_env``."""
        return not self.entries and not self.sites and not any(writable(d) for d in path_folders(path_env))

    def restore(self, path_env: str, keep: list[str]) -> tuple[list[str], list[str]]:
        """Put back what the agent changed, remove what it added that would run instead (the module docstring);
        nothing under ``keep``. Returns the paths put back and the paths removed. A restore the agent made
        impossible (a folder it locked) is the model's 0, a full disk too."""
        try:
            put_back = self._put_back(keep)
            removed = [p for p in self._shadows(path_env, keep) if self._remove(p)]
        except SandboxError:
            raise
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise SandboxExhaustedError(f"the agent filled the sandbox's disk, so the tools the task's "
                                            f"environment installed could not be put back ({exc}); graded 0") from exc
            if exc.errno in (errno.EACCES, errno.EPERM):
                raise GradingSabotagedError(f"the agent left the tools the task's environment installed so that they "
                                            f"cannot be put back before grading ({exc}); graded 0") from exc
            raise SandboxError(f"could not put back the tools the task's environment installed: {exc}") from exc
        return put_back, removed

    def _folders(self, keep: list[str] = ()) -> dict[str, dict[str, Installed]]:
        """The recorded entries by folder, then name (leaving out those under ``keep``)."""
        folders: dict[str, dict[str, Installed]] = defaultdict(dict)
        for path, entry in self.entries.items():
            if not under(path, keep):
                folder, name = posixpath.split(path)
                folders[folder][name] = entry
        return folders

    def _put_back(self, keep: list[str]) -> list[str]:
        put_back = []
        for folder, names in sorted(self._folders(keep).items()):
            with self.transfers.walk(folder, TIMEOUT) as walk:
                here = walk.real_folder(split(folder))
                changed = [n for n, e in names.items() if here is None or not self._same(here, n, e)]
                if not changed:
                    continue
                here = walk.ensure_dir(split(folder), replace_last=True, replace_links=True)
                for name in changed:
                    entry = names[name]
                    if entry.link is not None:
                        walk.put_link(here, name, entry.link)
                    else:
                        walk.put_file(here, name, str(self.folder / entry.copy))
                    put_back.append(f"{folder}/{name}")
        return put_back

    def _same(self, here: Here, name: str, entry: Installed) -> bool:
        """Whether ``name`` in the real folder ``here`` is still what was recorded (a link is never followed)."""
        try:
            st = os.stat(name, dir_fd=here.fd, follow_symlinks=False)
            if entry.link is not None:
                return stat.S_ISLNK(st.st_mode) and os.readlink(name, dir_fd=here.fd) == entry.link
            mode = stat.S_IMODE(st.st_mode) & 0o1777
            if not stat.S_ISREG(st.st_mode) or st.st_size != entry.size or mode != entry.mode:
                return False
            if (st.st_dev, st.st_ino, st.st_ctime_ns) == entry.stamp:
                return True
            now = os.open(name, O_READ, dir_fd=here.fd)
        except FileNotFoundError:
            return False
        try:
            with open(self.folder / entry.copy, "rb") as kept:
                return same_bytes(now, kept.fileno())
        finally:
            os.close(now)

    def _names(self, folder: str) -> list[str]:
        """What the real folder ``folder`` holds now ([] when it is not one)."""
        with self.transfers.walk(folder, TIMEOUT) as walk:
            here = walk.real_folder(split(folder))
            return sorted(os.listdir(here.fd)) if here is not None and here.fd is not None else []

    def _seen(self, folder: str) -> set[str]:
        """What a folder outside the writable roots (the host's ``/usr/bin``) holds, resolved as the sandbox would."""
        with self.transfers.walk(folder, TIMEOUT) as walk:
            try:
                found = walk.locate(split(folder))
            except (OSError, SandboxPathError):
                return set()
            return set(os.listdir(found.here.fd)) if found.kind == "dir" and found.here.fd is not None else set()

    def _package(self, folder: str) -> bool:
        """Whether the real folder ``folder`` is a regular Python package (it holds an ``__init__``)."""
        return any(n.startswith("__init__.") for n in self._names(folder))

    def _shadows(self, path_env: str, keep: list[str]) -> list[str]:
        """What the agent added that would run instead of a recorded tool (the module docstring's rules)."""
        keep = [*keep, "/tmp"]
        recorded = self._folders()
        found: list[str] = []
        dirs = path_folders(path_env)
        held: dict[str, set[str]] = {}  # what a PATH folder holds: what was recorded in a writable one, the host's
        for i, d in enumerate(dirs):
            if not writable(d) or under(d, keep):
                continue
            for q in dirs[i + 1 :]:
                if q not in held:
                    held[q] = set(recorded.get(q, {})) if writable(q) else self._seen(q)
            later = set().union(*(held[q] for q in dirs[i + 1 :] if q != d))
            found += [f"{d}/{n}" for n in self._added(d) if n in later]
        for site in sorted(self.sites):
            if not under(site, keep):
                found += [f"{site}/{n}" for n in self._added(site) if any(fnmatch.fnmatchcase(n, h) for h in HOOKS)]
        for folder, names in sorted(recorded.items()):
            if not under(folder, keep):
                found += self._module_shadows(folder, names)
        return list(dict.fromkeys(found))

    def _module_shadows(self, folder: str, names: dict[str, Installed]) -> list[str]:
        """Modules the agent added in ``folder`` that Python would import instead of a recorded one."""
        stems = [n[:-3] for n in names if n.endswith(".py")]
        scripts = any(e.script for e in names.values())
        if not stems and not scripts:
            return []
        found = []
        for n in self._added(folder):
            module = any(fnmatch.fnmatchcase(n, m) for m in MODULES)
            extension = any(n.startswith(f"{s}.") and n.endswith(".so") for s in stems)
            if (scripts and module) or extension or ((scripts or n in stems) and self._package(f"{folder}/{n}")):
                found.append(f"{folder}/{n}")
        if stems:
            found += [f"{folder}/__pycache__/{n}" for n in self._added(f"{folder}/__pycache__")
                      if any(n.startswith(f"{s}.") and n.endswith(".pyc") for s in stems)]
        return found

    def _added(self, folder: str) -> list[str]:
        """The names in the real folder ``folder`` now that were not there at start."""
        return [n for n in self._names(folder) if f"{folder}/{n}" not in self.seen]

    def _remove(self, path: str) -> bool:
        folder, name = posixpath.split(path)
        with self.transfers.walk(path, TIMEOUT) as walk:
            here = walk.real_folder(split(folder))
            if here is None:
                return False
            walk.remove(here, name)
            return True

    def discard(self) -> None:
        """Remove the record folder (at stop)."""
        rmtree(self.folder)
        self.entries.clear()


def installed_note(put_back: list[str], removed: list[str]) -> str | None:
    """The trial's note for what :meth:`InstalledTools.restore` did, else None."""

    def shown(paths: list[str]) -> str:
        return ", ".join(paths[:10]) + (f" and {len(paths) - 10} more" if len(paths) > 10 else "")

    said = []
    if put_back:
        said.append(f"put back what the task's environment installed and the agent changed, replaced or deleted "
                    f"({shown(put_back)})")
    if removed:
        said.append(f"removed what the agent added that would have run instead of it ({shown(removed)})")
    return f"local sandbox: before grading, {'; '.join(said)}" if said else None
