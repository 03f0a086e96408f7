"""A host folder made once, whole, and safe from concurrent trials and processes.

What agents run from (an npm prefix, the files a sandbox binds) must never be seen half made: a binary copied or
mapped while it is still being written is cut short, and dies at start-up with a bus error. So a folder is filled in
a staging folder beside it and renamed into place once complete; an asyncio lock serialises the trials of one
process and a file lock the processes of one machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

STAGING_MARK = ".installing-"
"""Names a staging folder: ``.<name>.installing-<random>`` beside ``<name>``."""
ASIDE_MARK = ".old-"
"""Names where an incomplete folder is moved before it is replaced: ``.<name>.old-<random>``."""

_locks: dict[Path, asyncio.Lock] = {}


async def make_once(folder: Path, fill: Callable[[Path], Awaitable[None]], *, done: Callable[[Path], bool],
                    lock_timeout: float | None = None) -> Path:
    """Return ``folder``, first made by ``fill`` unless ``done(folder)`` already holds: ``fill`` puts the files into
    a staging folder beside it (raising when it cannot), which is then renamed to ``folder``; an incomplete
    ``folder`` found there is moved aside and removed. Staging folders a killed process left are removed first."""
    if done(folder):
        return folder
    async with _locks.setdefault(folder, asyncio.Lock()):
        folder.parent.mkdir(parents=True, exist_ok=True)
        with open(folder.parent / f".{folder.name}.lock", "w") as fh:
            await asyncio.wait_for(asyncio.to_thread(fcntl.flock, fh, fcntl.LOCK_EX), lock_timeout)
            try:
                if not done(folder):
                    await _make(folder, fill)
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
    return folder


async def _make(folder: Path, fill: Callable[[Path], Awaitable[None]]) -> None:
    """``fill`` into a staging folder, renamed to ``folder`` (the file lock held)."""
    for mark in (STAGING_MARK, ASIDE_MARK):  # left by a process killed mid-way
        for stale in folder.parent.glob(f".{folder.name}{mark}*"):
            await asyncio.to_thread(shutil.rmtree, stale, True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}{STAGING_MARK}", dir=folder.parent))
    try:
        await fill(staging)
        os.chmod(staging, 0o755)  # mkdtemp made it 0700; a sandbox's uid reads it
        if folder.exists() or folder.is_symlink():  # an incomplete folder from before: moved aside, then removed
            aside = Path(tempfile.mkdtemp(prefix=f".{folder.name}{ASIDE_MARK}", dir=folder.parent))
            os.rename(folder, aside / folder.name)
            os.rename(staging, folder)
            await asyncio.to_thread(shutil.rmtree, aside, True)
        else:
            os.rename(staging, folder)
    finally:
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(shutil.rmtree, staging)
