"""Test tooling the agent installed is not what grades: which Python distributions count, and their removal from a
folder tree on the host (the ``local`` sandbox's writable roots; ``docker`` uses the container diff instead).

A fake ``pytest==8.4.1`` the agent installed satisfies ``test.sh``'s own ``pip install pytest==8.4.1`` ("Requirement
already satisfied"), in the image's interpreter or in the virtualenv folder ``test.sh`` is about to create
(``python -m venv`` keeps what is there); a distribution registering a ``pytest11`` plugin is loaded by whatever
pytest runs. Such distributions are never a task's answer, so the sandboxes uninstall the ones the agent added
before grading (docs/threat-model.md, "Packages the agent installed").
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

TEST_TOOLING = ("pytest", "pytest-*", "pluggy", "iniconfig", "uv", "pip", "coverage", "nose", "nose2")
"""Python distributions (normalized names, globs) that are the grader's tools; a distribution that registers a
pytest plugin (``[pytest11]`` in its ``entry_points.txt``) counts too."""
DIST_SUFFIXES = (".dist-info", ".egg-info")
SITE_FOLDERS = ("site-packages", "dist-packages")
MAX_FOLDERS = 100_000
"""Folders :func:`dist_folders` visits at most (an agent's tree of millions of folders cannot stall grading)."""
MAX_RECORD_BYTES = 4 << 20


def dist_name(folder: str) -> str:
    """The normalized distribution name of a ``name-version.dist-info`` (or ``.egg-info``) folder."""
    stem = os.path.basename(folder.rstrip("/")).rsplit(".", 1)[0]
    return stem.split("-", 1)[0].lower().replace("_", "-").replace(".", "-")


def is_test_tooling(folder: str, entry_points: str = "") -> bool:
    """Whether the distribution in ``folder`` (its ``entry_points.txt`` text) is test tooling."""
    name = dist_name(folder)
    return any(fnmatch.fnmatchcase(name, g) for g in TEST_TOOLING) or "[pytest11]" in entry_points


def dist_folders(root: Path, *, max_depth: int = 7) -> set[Path]:
    """Every ``site-packages/*.dist-info`` (or ``.egg-info``, ``dist-packages``) below ``root``, at most
    ``max_depth`` folders down, never through a link."""
    found: set[Path] = set()
    seen = 0
    base = len(root.parts)
    for here, dirs, _ in os.walk(root, followlinks=False):
        seen += 1
        path = Path(here)
        if seen > MAX_FOLDERS or len(path.parts) - base >= max_depth:
            dirs.clear()
            continue
        if path.name in SITE_FOLDERS:
            found.update(path / d for d in dirs if d.endswith(DIST_SUFFIXES))
            dirs.clear()
    return found


def _read(path: Path) -> str:
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_RECORD_BYTES:
            return ""
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _inside(path: str, root: Path) -> bool:
    """``path`` lies inside ``root`` with no link on the way (its real path is itself)."""
    return path.startswith(str(root) + os.sep) and os.path.realpath(path) == path


def record_paths(folder: str, entries: Iterable[str]) -> list[str]:
    """What uninstalling the distribution in ``folder`` touches: the folder, each path its ``RECORD`` (or
    ``installed-files.txt``) lines name, and the top-level package folder each lies in; normalised, once each.
    The caller decides which of them it may remove (inside its root, added by the agent)."""
    site = os.path.dirname(folder)
    paths = [folder]
    for line in entries:
        rel = line.split(",", 1)[0].strip()
        if not rel:
            continue
        paths.append(os.path.normpath(os.path.join(site, rel)))
        if "/" in rel and not rel.startswith(".."):
            paths.append(os.path.join(site, rel.split("/", 1)[0]))
    return list(dict.fromkeys(paths))


def tooling_note(removed: Iterable[str]) -> str | None:
    """The trial's note for what :func:`remove_added_tooling` (or a sandbox's own removal) took away, else None."""
    dists = [os.path.basename(p) for p in removed if p.endswith(DIST_SUFFIXES)]
    if not dists:
        return None
    return (f"uninstalled test tooling the agent installed before grading ({', '.join(dists)}): test.sh installs "
            "its own; what the image shipped is kept or put back")


def remove_added_tooling(root: Path, before: set[Path]) -> list[Path]:
    """Uninstall, below ``root``, each test-tooling distribution not in ``before`` (what was there when the sandbox
    started): its folder, the files its RECORD names and the top-level packages they lie in, never through a link
    and never outside ``root``. Returns what was removed."""
    removed: list[Path] = []
    for folder in sorted(dist_folders(root) - before):
        if folder.is_symlink() or not is_test_tooling(folder.name, _read(folder / "entry_points.txt")):
            continue
        listed = (_read(folder / "RECORD") + _read(folder / "installed-files.txt")).splitlines()
        for path in record_paths(str(folder), listed):
            if not _inside(path, root) or not os.path.lexists(path):
                continue
            try:
                if os.path.isdir(path):
                    shutil.rmtree(path, onexc=_writable_then_retry)
                else:
                    _writable_then_retry(os.unlink, path, None)
            except OSError:
                continue  # not ours to remove (what a root without capabilities cannot write, pip cannot either)
            removed.append(Path(path))
    return removed


def _writable_then_retry(func, path: str, _exc: BaseException | None) -> None:
    """Remove ``path`` with ``func``; when its folder was made read-only (the agent, as the same host user when
    tackroom runs unprivileged), make it writable first."""
    try:
        func(path)
    except PermissionError:
        os.chmod(os.path.dirname(path), 0o700)
        func(path)
