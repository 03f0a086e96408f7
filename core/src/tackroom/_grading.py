"""What keeps grading out of the agent's reach (docs/threat-model.md, "Grading").

- :func:`prepare_grading`: a FIFO, socket or device (or a link to one) where the verifier reads is
  sabotage: it would hang or steer test.sh. Found before the tests run, it is the model's failure.
- :func:`regrade_untouched`: when grading ends in a ``task`` error (a timeout, an unreadable reward), the
  runtime grades a fresh sandbox of the same task that no agent touched. Grading that works there failed
  because of what the agent did (:class:`GradingSabotagedError`, ``model``, reward 0); grading that fails
  there too is the task's own fault (:class:`GraderBrokenError`, ``task``).
- :func:`grade_separately`: ``[verifier] grading = "separate"``: the agent's files under
  ``grading_paths`` are copied into a fresh sandbox of the same image, and grading runs there, with the
  image's own tools and nothing the agent left running or installed.
"""

from __future__ import annotations

import asyncio
import shlex
import tempfile
from pathlib import Path

from tackroom._sandbox import GradingSabotagedError, Sandbox, SandboxExhaustedError

SPECIAL_FILES = r"""
for p in "$@"; do
    [ -e "$p" ] || [ -L "$p" ] || continue
    find "$p" \( -type p -o -type s -o -type b -o -type c \
        -o \( -type l ! -lname /dev/null \( -xtype p -o -xtype s -o -xtype b -o -xtype c \) \) \) -print 2>/dev/null | head -n 5
done
"""
"""Prints up to five FIFOs, sockets, devices, or links to one (but ``/dev/null``), under each path argument."""


PREPARE = r"""
n=$1; shift; i=0; bad=
while [ "$i" -lt "$n" ]; do
    p=$1; shift; i=$((i + 1))
    rm -rf "$p" 2>/dev/null; mkdir -p "$p" 2>/dev/null
    if [ ! -d "$p" ] || [ -L "$p" ] || [ -n "$(ls -A "$p" 2>/dev/null)" ]; then echo "NOTEMPTY $p"; bad=1; fi
done
[ -n "$bad" ] && exit 0
""" + SPECIAL_FILES
"""Args: how many folders to recreate empty, those folders, then the read paths to search for special files."""


async def prepare_grading(sandbox: Sandbox, fresh: list[str], read: list[str], *, timeout: float = 60.0) -> None:
    """:meth:`Sandbox.fresh_folder` for each of ``fresh``, and a search for special files under ``read``, in one command.

    Raises :class:`GradingSabotagedError` when a folder cannot be emptied or a special file sits where the
    verifier reads."""
    reads = list(dict.fromkeys(p for p in read if p))
    result = await sandbox.exec(["sh", "-c", PREPARE, "tackroom-prepare", str(len(fresh)), *fresh, *reads],
                                cwd="/", timeout=timeout)
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    stuck = [line[len("NOTEMPTY "):] for line in lines if line.startswith("NOTEMPTY ")]
    if stuck or not result.ok:
        raise GradingSabotagedError(f"the agent left {', '.join(stuck) or ' '.join(fresh)} so that it cannot be "
                                    f"recreated empty (exit {result.exit_code}: {result.stderr.strip()[:300]}); graded 0")
    if lines:
        raise GradingSabotagedError(
            f"the agent left special files where the verifier reads ({', '.join(shlex.quote(f) for f in lines)}): "
            "a FIFO, socket or device there can hang or steer grading; graded 0"
        )


def workdir_of(sandbox: Sandbox) -> str:
    """The sandbox's working directory (a provider may learn it from the image, as docker does)."""
    workdir = getattr(sandbox, "workdir", None)
    return workdir if isinstance(workdir, str) and workdir.startswith("/") else sandbox.spec.workdir


DEFAULT_COPY_BUDGET_MB = 10240
"""What separate grading copies at most for a task without ``storage_mb`` (Harbor's default disk)."""


async def copy_paths(source: Sandbox, dest: Sandbox, paths: list[str], *, timeout: float = 300.0,
                     budget_mb: int | None = None) -> list[str]:
    """Copy each of ``paths`` that exists in ``source`` to the same place in ``dest`` (through the host);
    returns the paths copied. Transfers never follow a link the agent planted (the sandbox contract).

    The copy holds at most ``budget_mb`` (the task's ``storage_mb``), counting each file's apparent size (a
    sparse file counts whole, as it would once expanded): more is the agent's doing, the model's 0
    (:class:`SandboxExhaustedError`), never a full host disk."""
    budget = (budget_mb or DEFAULT_COPY_BUDGET_MB) * 1024 * 1024
    used = 0
    copied: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tackroom-grading-") as tmp:
        for i, path in enumerate(dict.fromkeys(paths)):
            local = Path(tmp) / str(i)
            try:
                await source.download(path, local, timeout=timeout)
            except FileNotFoundError:
                continue
            used += sum(max(f.lstat().st_size, f.lstat().st_blocks * 512) for f in (local, *local.rglob("*")))
            if used > budget:
                raise SandboxExhaustedError(f"the files to grade ({', '.join([*copied, path])}) hold more than the "
                                            f"task's storage ({budget // 1024 // 1024} MB); graded 0")
            if local.is_dir():
                await dest.fresh_folder(path)
            await dest.upload(local, path, timeout=timeout)
            copied.append(path)
    return copied


async def stop_quietly(sandbox: Sandbox, timeout: float = 60.0) -> str | None:
    """Stop ``sandbox``; a failure is returned as a note, never raised."""
    try:
        await asyncio.shield(asyncio.wait_for(sandbox.stop(), timeout))
    except (Exception, asyncio.CancelledError) as exc:
        return f"teardown of a grading sandbox failed: {type(exc).__name__}: {exc}"
    return None
