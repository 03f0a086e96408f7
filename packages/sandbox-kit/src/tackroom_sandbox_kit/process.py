"""Running a host subprocess with a hard timeout and capped output (used by sandboxes)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel


class ProcessOutput(BaseModel):
    """What :func:`run_process` saw: the exit code (``-9`` when it never exited), both streams capped at the
    limit (``truncated`` when anything was dropped), whether the timeout killed it, and how long it ran."""

    returncode: int
    stdout: bytes
    stderr: bytes
    truncated: bool
    timed_out: bool
    duration_s: float


async def drain_capped(stream: asyncio.StreamReader, limit: int, sink: bytearray) -> bool:
    """Read ``stream`` to its end, keeping at most ``limit`` bytes in ``sink`` (so the child never blocks on a
    full pipe); return whether anything was dropped."""
    dropped = False
    while chunk := await stream.read(65536):
        room = limit - len(sink)
        if room > 0:
            sink += chunk[:room]
        if len(chunk) > max(room, 0):
            dropped = True
    return dropped


def kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the process group of ``proc`` (started with ``start_new_session=True``); a group already gone is fine."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def spawn_in_group(argv: Sequence[str], **kwargs) -> asyncio.subprocess.Process:
    """Start ``argv`` in its own process group; cancelled while it starts, the whole group is killed.

    asyncio kills only the child's own pid when the start is cancelled, so a child that had already forked
    (``nsenter -p`` runs the command in a grandchild) would leave that grandchild running. Here the start
    finishes, shielded, and its group is killed before the cancellation goes on."""
    spawning = asyncio.ensure_future(asyncio.create_subprocess_exec(*argv, start_new_session=True, **kwargs))
    try:
        return await asyncio.shield(spawning)
    except asyncio.CancelledError:
        spawning.add_done_callback(_kill_spawned)  # a second cancellation of the wait below still kills it
        await asyncio.wait([spawning])
        raise


def _kill_spawned(spawning: asyncio.Future[asyncio.subprocess.Process]) -> None:
    if not spawning.cancelled() and spawning.exception() is None:
        kill_group(spawning.result())


async def run_process(
    argv: Sequence[str],
    *,
    timeout: float,
    stdin: bytes | Path | None = None,
    stdout_path: Path | None = None,
    output_limit: int = 1_000_000,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    pass_fds: Sequence[int] = (),
) -> ProcessOutput:
    """Run ``argv`` in its own process group; on timeout kill the whole group.

    ``stdin`` is bytes or a host file to read; ``stdout_path`` sends stdout to a host file instead of the
    result. Output beyond ``output_limit`` bytes per stream is read and discarded (the child never blocks
    on a full pipe) and reported as ``truncated``.
    """
    start = time.monotonic()
    with contextlib.ExitStack() as files:
        stdin_file = files.enter_context(open(stdin, "rb")) if isinstance(stdin, Path) else None
        stdout_file = files.enter_context(open(stdout_path, "wb")) if stdout_path is not None else None
        proc = await spawn_in_group(
            argv,
            stdin=stdin_file or (asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL),
            stdout=stdout_file or asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=cwd,
            pass_fds=pass_fds,
        )
        return await _communicate(proc, stdin if isinstance(stdin, bytes) else None, timeout, output_limit, start)


async def _communicate(proc: asyncio.subprocess.Process, stdin: bytes | None, timeout: float, output_limit: int,
                       start: float) -> ProcessOutput:
    out, err = bytearray(), bytearray()

    async def communicate() -> tuple[bool, bool]:
        if stdin is not None:
            assert proc.stdin is not None
            try:
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                pass
            proc.stdin.close()
        assert proc.stderr is not None
        readers = [drain_capped(proc.stderr, output_limit, err)]
        if proc.stdout is not None:  # else stdout goes to a file
            readers.append(drain_capped(proc.stdout, output_limit, out))
        dropped = await asyncio.gather(*readers)
        await proc.wait()
        return (dropped[1] if len(dropped) > 1 else False), dropped[0]

    timed_out = False
    try:
        dropped_out, dropped_err = await asyncio.wait_for(communicate(), timeout)
    except TimeoutError:
        timed_out = True
        dropped_out = dropped_err = False
        kill_group(proc)
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            pass
    except BaseException:  # cancelled: never leave the child running
        kill_group(proc)
        raise
    return ProcessOutput(
        returncode=proc.returncode if proc.returncode is not None else -9,
        stdout=bytes(out),
        stderr=bytes(err),
        truncated=dropped_out or dropped_err,
        timed_out=timed_out,
        duration_s=time.monotonic() - start,
    )
