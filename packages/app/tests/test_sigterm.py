"""SIGTERM stops a command the way Ctrl-C does: what the run started is cleaned up, then it exits 143 (Ctrl-C: 130,
with one line saying so, no traceback)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tackroom_app import INTERRUPTED_EXIT_CODE, TERMINATED_EXIT_CODE

WORK = """
import asyncio, signal, sys
from pathlib import Path
# Python leaves SIGINT ignored when its parent ignored it (a `&` job of a non-interactive shell, some runners)
signal.signal(signal.SIGINT, signal.default_int_handler)
from tackroom_app import run_to_completion

marks = Path(sys.argv[1])

async def work():
    marks.joinpath("started").touch()
    try:
        await asyncio.sleep(600)
    finally:
        await asyncio.sleep(0.2)  # cleanup that awaits (a server stop in a thread, a sandbox teardown)
        marks.joinpath("cleaned").touch()

run_to_completion(work())
"""

SWALLOWS = WORK.replace("        await asyncio.sleep(600)\n", "        try:\n            await asyncio.sleep(600)\n"
                        "        except asyncio.CancelledError:\n            pass\n")


def _terminate(tmp_path: Path, script: str, sig: int = signal.SIGTERM) -> subprocess.CompletedProcess:
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("script", [WORK, SWALLOWS], ids=["cancelled", "swallows-the-cancel"])
def test_sigterm_runs_the_cleanup_then_exits_143(tmp_path: Path, script: str) -> None:
    done = _terminate(tmp_path, script)
    assert (tmp_path / "cleaned").exists(), done.stderr
    assert done.returncode == TERMINATED_EXIT_CODE == 143, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("script", [WORK, SWALLOWS], ids=["cancelled", "swallows-the-cancel"])
def test_ctrl_c_runs_the_cleanup_then_exits_130_with_one_line(tmp_path: Path, script: str) -> None:
    done = _terminate(tmp_path, script, signal.SIGINT)
    assert (tmp_path / "cleaned").exists(), done.stderr
    assert done.returncode == INTERRUPTED_EXIT_CODE == 130, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.strip() == "error: interrupted: what the run started has been stopped"


def test_plain_asyncio_run_would_leave_it_behind(tmp_path: Path) -> None:
    """The reason for run_to_completion: asyncio.run dies on SIGTERM without running any finally."""
    done = _terminate(tmp_path, WORK.replace("run_to_completion(work())", "asyncio.run(work())"))
    assert not (tmp_path / "cleaned").exists() and done.returncode == -signal.SIGTERM


def test_off_the_main_thread_it_is_asyncio_run(tmp_path: Path) -> None:
    """A command invoked from a worker thread (a test runner, an embedding app) still runs; no handler is set."""
    import asyncio
    import threading

    from tackroom_app import run_to_completion

    async def work() -> int:
        await asyncio.sleep(0)
        return 7

    got: list[object] = []
    thread = threading.Thread(target=lambda: got.append(run_to_completion(work())))
    thread.start()
    thread.join(30)
    assert got == [7]
