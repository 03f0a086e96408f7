"""What an exit status says about how a program ended: by itself, or killed by a signal (a crash, an OOM kill).

A shell reports a child killed by signal N as status ``128 + N`` (``$?`` is 135 after a SIGBUS, 139 after a
SIGSEGV, 137 after a SIGKILL); Python's ``subprocess`` as ``-N``. An agent binary that dies this way at start-up
or mid-run has crashed (Bun's "Bus error" under load, a segfault, the kernel's OOM killer): harnesses name the
signal in their ``infra`` error so the note says what happened and the runtime retries the attempt.
"""

from __future__ import annotations

import signal

CRASH_SIGNALS = frozenset({signal.SIGBUS, signal.SIGSEGV, signal.SIGILL, signal.SIGFPE, signal.SIGABRT,
                           signal.SIGKILL, signal.SIGSYS, signal.SIGTRAP})
"""Signals a program dies of when it crashes or the kernel kills it (SIGKILL: the OOM killer, usually)."""

_WHAT = {signal.SIGBUS: "bus error", signal.SIGSEGV: "segmentation fault", signal.SIGILL: "illegal instruction",
         signal.SIGFPE: "arithmetic fault", signal.SIGABRT: "aborted", signal.SIGSYS: "bad system call",
         signal.SIGTRAP: "trap", signal.SIGTERM: "terminated", signal.SIGINT: "interrupted",
         signal.SIGKILL: "killed: the kernel's OOM killer, when nobody sent it"}


def exit_signal(status: int | str | None) -> signal.Signals | None:
    """The signal that ended a process whose exit status is ``status`` (``128 + N`` from a shell, ``-N`` from
    Python), or None when it exited by itself (or the status is unknown)."""
    try:
        code = int(str(status).strip())
    except ValueError:
        return None
    number = -code if code < 0 else code - 128 if 128 < code < 128 + 65 else 0
    try:
        return signal.Signals(number) if number else None
    except ValueError:
        return None


def describe_exit(status: int | str | None) -> str:
    """``exited with status 1``, ``was killed by SIGBUS (signal 7, bus error; exit status 135)``, or
    ``died without an exit status``."""
    if status is None or not str(status).strip():
        return "died without an exit status"
    sig = exit_signal(status)
    if sig is None:
        return f"exited with status {str(status).strip()}"
    what = _WHAT.get(sig)
    return f"was killed by {sig.name} (signal {int(sig)}{', ' + what if what else ''}; exit status {str(status).strip()})"
