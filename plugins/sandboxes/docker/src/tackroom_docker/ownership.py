"""Which process created a container, so ``cleanup()`` removes only containers whose creator is gone.

The ``tackroom.owner`` label is ``HOST:PID:START`` where START is the process's
start time in clock ticks since boot (``/proc/PID/stat`` field 22), so a reused
PID is not mistaken for the creator.
"""

from __future__ import annotations

import os
import socket
from functools import cache


def _start_ticks(pid: int) -> str | None:
    try:
        stat = open(f"/proc/{pid}/stat", encoding="ascii", errors="replace").read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses; fields after the last ')' are plain.
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


@cache
def owner_label() -> str:
    """This process's owner label."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid) or '?'}"


def is_orphan(label: str | None) -> bool:
    """True when the label names a process on this host that no longer runs (or no label at all).

    Containers labelled by another host are never orphans here: we cannot see its processes.
    """
    if not label:
        return True
    host, _, rest = label.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname():
        return False
    if not pid_text.isdigit():
        return True
    current = _start_ticks(int(pid_text))
    return current is None or (start not in ("", "?") and current != start)
