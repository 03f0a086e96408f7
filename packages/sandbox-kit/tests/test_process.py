"""run_process: a host subprocess in its own process group, killed whole on timeout or cancellation, its output
capped without the child ever blocking on a full pipe."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from tackroom_sandbox_kit import ProcessOutput, run_process


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:  # reaped since the kill above
        return False


async def gone(pid: int) -> bool:
    """Whether ``pid`` has exited within 5 s (a killed process runs once more to die; not at once on a loaded machine)."""
    for _ in range(50):
        if not alive(pid):
            return True
        await asyncio.sleep(0.1)
    return False


async def cancel_once_written(task: asyncio.Future, pidfile) -> None:
    """Cancel ``task`` once its command has written ``pidfile`` (5 s at most), and see the cancellation go on."""
    for _ in range(100):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_output_stdin_and_exit_code():
    out = await run_process([sys.executable, "-c", "import sys; d = sys.stdin.read(); print(d.upper()); "
                             "print('err', file=sys.stderr); sys.exit(3)"], timeout=30, stdin=b"hi")
    assert isinstance(out, ProcessOutput)
    assert (out.returncode, out.stdout, out.stderr, out.truncated, out.timed_out) == (3, b"HI\n", b"err\n", False, False)


async def test_stdin_from_a_file_stdout_to_a_file_and_a_passed_descriptor(tmp_path):
    source, sink = tmp_path / "in", tmp_path / "out"
    source.write_bytes(b"from a file")
    read_end, write_end = os.pipe()
    try:
        out = await run_process([sys.executable, "-c", f"import os, sys; os.write({write_end}, b'fd'); "
                                 "sys.stdout.write(sys.stdin.read().upper()); print('err', file=sys.stderr)"],
                                timeout=30, stdin=source, stdout_path=sink, pass_fds=[write_end])
        assert os.read(read_end, 10) == b"fd"
    finally:
        os.close(read_end)
        os.close(write_end)
    assert (out.returncode, out.stdout, out.stderr, out.truncated) == (0, b"", b"err\n", False)
    assert sink.read_bytes() == b"FROM A FILE"


async def test_output_past_the_limit_is_read_and_dropped_not_blocking_the_child():
    out = await run_process([sys.executable, "-c", "import sys; sys.stdout.write('x' * 5_000_000); print('done', "
                             "file=sys.stderr)"], timeout=30, output_limit=1000)
    assert out.returncode == 0 and out.stdout == b"x" * 1000 and out.truncated and out.stderr == b"done\n"


async def test_a_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "grandchild"
    script = f"sleep 300 & echo $! > {pidfile}; wait"
    out = await run_process(["bash", "-c", script], timeout=1)
    assert out.timed_out and out.returncode < 0, out
    grandchild = int(pidfile.read_text())
    assert await gone(grandchild), "the timeout left a grandchild running"


async def test_a_cancelled_caller_leaves_no_child_running(tmp_path):
    pidfile = tmp_path / "child"
    task = asyncio.ensure_future(run_process(["bash", "-c", f"echo $$ > {pidfile}; exec sleep 300"], timeout=60))
    await cancel_once_written(task, pidfile)
    child = int(pidfile.read_text())
    assert await gone(child), "cancelling run_process left its child running"


async def test_a_caller_cancelled_while_the_child_starts_leaves_nothing_of_its_group_running(tmp_path, monkeypatch):
    """asyncio kills only the child's pid when its start is cancelled; a grandchild it already forked (as
    ``nsenter -p`` does) would live on. Here the start is held open past the cancellation."""
    pidfile = tmp_path / "grandchild"
    started = asyncio.Event()
    real_start = asyncio.create_subprocess_exec

    async def slow_start(*argv, **kwargs):
        proc = await real_start(*argv, **kwargs)
        started.set()
        await asyncio.sleep(3)  # the pipes' connection, on a loaded machine
        return proc

    monkeypatch.setattr(asyncio, "create_subprocess_exec", slow_start)
    task = asyncio.ensure_future(run_process(["bash", "-c", f"sleep 300 & echo $! > {pidfile}; wait"], timeout=60))
    await started.wait()
    await cancel_once_written(task, pidfile)
    grandchild = int(pidfile.read_text())
    assert await gone(grandchild), "a cancellation during the start left the child's group running"


async def test_a_missing_program_raises_before_anything_runs():
    with pytest.raises(FileNotFoundError):
        await run_process(["/nonexistent/tackroom-no-such-program"], timeout=5)
