"""Services kept into grading: the processes of a sandbox that hold a listening socket, frozen with SIGSTOP.

``kill_processes(keep_listening=True)`` freezes every process of the sandbox's pid namespace (a stopped
process cannot fork, write or signal), keeps those holding a listening socket (TCP listen, bound UDP, a
listening unix stream or seqpacket socket) and SIGKILLs the rest until none is left. Only tackroom sends
SIGCONT, for the duration of the grader's command (:mod:`tackroom_local.grading`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from tackroom import SandboxError

_UNIX_LISTENING = 0x10000
"""``__SO_ACCEPTCON`` in /proc/net/unix's Flags column."""
_UNIX_TYPES = {1: "unix", 5: "unix-seqpacket"}
"""SOCK_STREAM and SOCK_SEQPACKET; a listening datagram socket does not exist."""


@dataclass(frozen=True)
class Listener:
    kind: str
    address: str


def namespace_pids(pidns: int | None, *, skip: set[int]) -> set[int]:
    """Host pids of the live processes in the pid namespace ``pidns`` (zombies are dead), but ``skip``."""
    found: set[int] = set()
    if pidns is None:
        return found
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{entry.name}/ns/pid") == f"pid:[{pidns}]" and state(int(entry.name)) not in "ZX":
                found.add(int(entry.name))
    return found


def state(pid: int, tid: int | None = None) -> str:
    """The one-letter state of a process (or one of its threads); ``X`` when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/task/{tid}/stat" if tid else f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return "X"
    return raw[raw.rfind(b")") + 2 :][:1].decode() or "X"


def stopped(pid: int) -> bool:
    """Every thread of ``pid`` is stopped (``T``, or ``t`` under a tracer) or dead."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return True
    return all(state(pid, tid) in "TtZX" for tid in tids)


def freeze(pidns: int | None, skip: set[int], deadline: float) -> set[int]:
    """SIGSTOP every process of the namespace but ``skip`` until all are stopped; returns them.

    A process may fork between the listing and its stop: the listing is taken again until two in a row find
    the same processes, all stopped (a stopped process forks nothing). A process in the kernel (state D)
    stops when it returns."""
    last: set[int] | None = None
    while True:
        pids = namespace_pids(pidns, skip=skip)
        running = [p for p in pids if not stopped(p)]
        if not running and pids == last:
            return pids
        last = pids
        for pid in running:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)
        if time.monotonic() > deadline:
            raise TimeoutError(f"host pids {sorted(running)} did not stop")
        time.sleep(0.001)


SETTLE_SEC = 10.0
"""How long the end of the agent's turn waits, at most, for busy processes to settle (a server still importing its
libraries when the turn ends has no listening socket yet; Harbor grades the live container later, so it would
have one there)."""
SETTLE_STEP_SEC = 0.1


def cpu_ticks(pid: int) -> int | None:
    """User + system CPU time of ``pid`` in clock ticks; None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    return int(fields[11]) + int(fields[12]) if len(fields) > 12 else None


def settle(pidns: int | None, skip: set[int], netns_pid: int, limit: float) -> tuple[float, list[str]]:
    """Wait up to ``limit`` seconds until no process of the namespace that holds no listening socket (but ``skip``)
    is busy: none that was there :data:`SETTLE_STEP_SEC` ago used CPU since or is in the kernel (state D). A
    process just forked counts from the next step on, so a loop that forks ``sleep`` every 50 ms settles at once.

    A server the agent's last command started (``setsid python server.py &``) is busy until it listens, then idles
    in ``accept``; an idle shell or tmux server does not hold the turn's end up. Returns the seconds waited and,
    when the limit ran out, the processes still busy (``pid 12 python3``)."""
    t0 = time.monotonic()
    last: dict[int, int | None] | None = None
    while True:
        pids = namespace_pids(pidns, skip=skip)
        now = {pid: cpu_ticks(pid) for pid in pids}
        listening = set(holders(pids, listening_sockets(netns_pid))) if pids else set()
        busy = {pid for pid, ticks in now.items() if pid not in listening
                and (last is None or (pid in last and (ticks != last[pid] or state(pid) == "D")))}
        if not busy:
            return time.monotonic() - t0, []
        if time.monotonic() - t0 >= limit:
            return time.monotonic() - t0, [describe(pid, []).removesuffix(": ") for pid in sorted(busy)]
        last = now
        time.sleep(SETTLE_STEP_SEC)


def resume(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGCONT)


def kill_all_but(pidns: int | None, keep: set[int], deadline: float) -> None:
    """SIGKILL every process of the namespace but ``keep`` until none is left (they are stopped: none forks)."""
    while left := namespace_pids(pidns, skip=keep):
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise TimeoutError(f"host pids {sorted(left)} are still alive after SIGKILL")
        time.sleep(0.001)


def listening_sockets(netns_pid: int) -> dict[int, Listener]:
    """{socket inode: what it listens on} in the network namespace of ``netns_pid``."""
    found: dict[int, Listener] = {}
    for proto, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6), ("udp", socket.AF_INET),
                          ("udp6", socket.AF_INET6)):  # fmt: skip
        try:
            lines = Path(f"/proc/{netns_pid}/net/{proto}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10:
                continue
            local, st, inode = fields[1], int(fields[3], 16), int(fields[9])
            host, port = local.split(":")
            # TCP_LISTEN; a bound, unconnected UDP socket is TCP_CLOSE (7) with a port
            if (proto.startswith("tcp") and st == 0x0A) or (proto.startswith("udp") and st == 7 and int(port, 16)):
                found[inode] = Listener(proto.rstrip("6"), f"{_address(host, family)}:{int(port, 16)}")
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{netns_pid}/net/unix").read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) < 7:
                continue
            flags, kind, inode = int(fields[3], 16), int(fields[4], 16), int(fields[6])
            if flags & _UNIX_LISTENING and kind in _UNIX_TYPES:
                found[inode] = Listener(_UNIX_TYPES[kind], fields[7] if len(fields) > 7 else "(unnamed)")
    return found


def _address(hex_host: str, family: int) -> str:
    raw = bytes.fromhex(hex_host)
    # /proc/net prints each 32-bit word in host (little-endian) order
    raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(raw)) if family == socket.AF_INET else f"[{ipaddress.ip_address(raw)}]"


def holders(pids: set[int], sockets: dict[int, Listener]) -> dict[int, list[Listener]]:
    """{pid: the listening sockets it holds} for the processes of ``pids`` that hold one."""
    held: dict[int, list[Listener]] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if link.startswith("socket:[") and (found := sockets.get(int(link[8:-1]))) is not None:
                        if found not in held.setdefault(pid, []):
                            held[pid].append(found)
    return held


def describe(pid: int, listeners: list[Listener]) -> str:
    """``pid 12 nginx: tcp 0.0.0.0:80`` with the pid as the sandbox sees it."""
    inner, comm = str(pid), "?"
    with contextlib.suppress(OSError):
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                inner = line.split()[-1]
    return f"pid {inner} {comm}: " + ", ".join(f"{x.kind} {x.address}" for x in listeners)


def keep_listening(pidns: int | None, keeper: int, settle_sec: float, deadline: float,
                   notes: list[str]) -> dict[int, list[Listener]]:
    """The end of the agent's turn that keeps services: let busy processes settle (up to ``settle_sec``), freeze
    every process of the namespace but its ``keeper``, kill those that hold no listening socket (``notes`` say which
    and why); returns the processes kept, frozen, with their sockets (none: nothing holds one)."""
    waited, busy = settle(pidns, {keeper}, keeper, min(settle_sec, max(0.0, deadline - time.monotonic() - 5)))
    if waited >= 0.2:
        notes.append(f"the agent's turn ended with processes still busy; waited {waited:.1f}s for them to settle "
                     "(a service still starting opens its socket)"
                     + (f"; still busy after that: {', '.join(busy[:5])}" if busy else ""))
    try:
        frozen = freeze(pidns, {keeper}, deadline)
        held = holders(frozen, listening_sockets(keeper))
        killed = [describe(pid, []).removesuffix(": ") for pid in sorted(frozen - set(held))]
        if held:
            kill_all_but(pidns, {keeper} | set(held), deadline)
    except TimeoutError as exc:
        raise SandboxError(f"processes survived kill_processes(keep_listening=True): {exc}") from None
    if killed:
        shown = ", ".join(killed[:8])
        notes.append(f"killed {len(killed)} process(es) of the agent's turn that held no listening socket (only "
                     f"listening ones are kept into grading): {shown}{' and more' if len(killed) > 8 else ''}")
    return held
