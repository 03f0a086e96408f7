"""The grader's seccomp filter: what Docker's default profile refuses a container, refused to ``test.sh`` too.

``run_grader`` starts the command from the host (:mod:`tackroom_docker.grader_entry`), not through ``docker exec``,
so the container's seccomp profile does not apply to it; the tests it runs execute the agent's code. This filter
takes its place: the syscalls Docker's default profile refuses are refused with ``EPERM`` (those gated on a
capability only when the container's bounding set lacks it, as Docker does), ``clone`` may not create namespaces
without ``CAP_SYS_ADMIN``, ``clone3`` answers ``ENOSYS`` then (so libc falls back to ``clone``), and syscalls of
another ABI (i386, x32) are refused. It is a list of refusals rather than Docker's list of what is allowed: a
syscall newer than this table is allowed (kernel attack surface the container profile would close; see
docs/threat-model.md). Only x86_64 has a table; elsewhere :func:`grader_filter` returns ``None`` and the grader
runs unfiltered, as before.
"""

from __future__ import annotations

import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
EPERM, ENOSYS = 1, 38
X32_BIT = 0x40000000
NAMESPACE_FLAGS = 0x7E020000
"""CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET."""
CAP_SYS_ADMIN = 21
CLONE, CLONE3 = 56, 435

# x86_64 syscall numbers (asm/unistd_64.h) and the capability that lets Docker's default profile allow each
# (None: refused whatever the capabilities).
REFUSED_X86_64: dict[str, tuple[int, int | None]] = {
    "add_key": (248, None), "keyctl": (250, None), "request_key": (249, None),
    "userfaultfd": (323, None), "kexec_load": (246, None), "kexec_file_load": (320, None),
    "io_uring_setup": (425, None), "io_uring_enter": (426, None), "io_uring_register": (427, None),
    "create_module": (174, None), "get_kernel_syms": (177, None), "query_module": (178, None),
    "nfsservctl": (180, None), "uselib": (134, None), "ustat": (136, None), "sysfs": (139, None),
    "_sysctl": (156, None), "open_by_handle_at": (304, None), "name_to_handle_at": (303, None),
    "init_module": (175, 16), "finit_module": (313, 16), "delete_module": (176, 16),  # CAP_SYS_MODULE
    "iopl": (172, 17), "ioperm": (173, 17),  # CAP_SYS_RAWIO
    "acct": (163, 20),  # CAP_SYS_PACCT
    "kcmp": (312, 19), "process_vm_readv": (310, 19), "process_vm_writev": (311, 19),  # CAP_SYS_PTRACE
    "reboot": (169, 22),  # CAP_SYS_BOOT
    "settimeofday": (164, 25), "clock_settime": (227, 25), "clock_adjtime": (305, 25),  # CAP_SYS_TIME
    "vhangup": (153, 26),  # CAP_SYS_TTY_CONFIG
    "swapon": (167, CAP_SYS_ADMIN), "swapoff": (168, CAP_SYS_ADMIN), "mount": (165, CAP_SYS_ADMIN),
    "umount2": (166, CAP_SYS_ADMIN), "pivot_root": (155, CAP_SYS_ADMIN), "setns": (308, CAP_SYS_ADMIN),
    "unshare": (272, CAP_SYS_ADMIN), "bpf": (321, CAP_SYS_ADMIN), "perf_event_open": (298, CAP_SYS_ADMIN),
    "syslog": (103, CAP_SYS_ADMIN), "lookup_dcookie": (212, CAP_SYS_ADMIN), "quotactl": (179, CAP_SYS_ADMIN),
    "fsopen": (430, CAP_SYS_ADMIN), "fsconfig": (431, CAP_SYS_ADMIN), "fsmount": (432, CAP_SYS_ADMIN),
    "fspick": (433, CAP_SYS_ADMIN), "open_tree": (428, CAP_SYS_ADMIN), "move_mount": (429, CAP_SYS_ADMIN),
    "mount_setattr": (442, CAP_SYS_ADMIN),
}


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


LD_ABS, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06


def x86_64_filter(capabilities: int) -> bytes:
    """The classic BPF program (``struct sock_filter[]``) for a command whose bounding set is ``capabilities``."""
    refused = sorted({nr for nr, cap in REFUSED_X86_64.values() if cap is None or not capabilities >> cap & 1})
    admin = bool(capabilities >> CAP_SYS_ADMIN & 1)
    prog = [
        _op(LD_ABS, 4),  # seccomp_data.arch
        _op(JEQ, AUDIT_ARCH_X86_64, 1, 0),
        _op(RET, RET_ERRNO | ENOSYS),  # i386 through int 0x80
        _op(LD_ABS, 0),  # seccomp_data.nr
        _op(JGE, X32_BIT, 0, 1),
        _op(RET, RET_ERRNO | ENOSYS),  # the x32 ABI
    ]
    for nr in refused:
        prog += [_op(JEQ, nr, 0, 1), _op(RET, RET_ERRNO | EPERM)]
    if not admin:
        prog += [_op(JEQ, CLONE3, 0, 1), _op(RET, RET_ERRNO | ENOSYS),
                 _op(JEQ, CLONE, 0, 3), _op(LD_ABS, 16),  # the low half of args[0], clone's flags
                 _op(JSET, NAMESPACE_FLAGS, 0, 1), _op(RET, RET_ERRNO | EPERM)]
    prog.append(_op(RET, RET_ALLOW))
    return b"".join(prog)


def grader_filter(capabilities: int, machine: str | None = None) -> bytes | None:
    """The filter for this host's architecture, or ``None`` where there is no table (not x86_64)."""
    return x86_64_filter(capabilities) if (machine or platform.machine()) in ("x86_64", "amd64") else None
