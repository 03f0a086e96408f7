"""Running a host subprocess with a hard timeout and capped output (used by sandboxes)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Sequence

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


async def run_process(
    argv: Sequence[str],
    *,
    timeout: float,
    stdin: bytes | None = None,
    output_limit: int = 1_000_000,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> ProcessOutput:
    """Run ``argv`` in its own process group; on timeout kill the whole group.

    Output beyond ``output_limit`` bytes per stream is read and discarded (the
    child never blocks on a full pipe) and reported as ``truncated``.
    """
    start = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        env=env,
        cwd=cwd,
    )
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
        assert proc.stdout is not None and proc.stderr is not None
        dropped = await asyncio.gather(drain_capped(proc.stdout, output_limit, out), drain_capped(proc.stderr, output_limit, err))
        await proc.wait()
        return dropped[0], dropped[1]

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
