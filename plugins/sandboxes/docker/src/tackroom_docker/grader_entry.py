"""Host-side entry of ``run_grader``: run as a script by the host's Python (stdlib only), as root.

Everything is imported and every host file is opened before the process joins the container's namespaces: after
``setns`` into the container's mount namespace, paths resolve in the container, where the agent wrote.

Steps (one JSON argument holds the settings, see ``tackroom_docker.grading``):
1. join the container's ipc, uts and mount namespaces, and its network namespace (``net = "container"``),
   or stay on the host's (``"host"``: grading online while the agent ran offline), or a fresh one with only
   loopback (``"isolated"``); make the ``readonly`` folders (the image's tool roots) read-only bind mounts in
   the container's mount namespace, so kept services cannot rewrite a grader tool while they run; then a
   private mount namespace of our own, where those bind mounts are taken off again (the command may install);
2. the toolset's sh, with full capabilities, copies each ``private`` folder into a tmpfs and mounts the copy
   over it, in this namespace only: no process of the container sees or writes the copies;
3. kept services are resumed (SIGCONT) and the command runs: in the container's cgroups, with the container's
   capability bounding set, ``no_new_privs``, the seccomp filter of :mod:`tackroom_docker.seccomp` (Docker's
   refusals), a clean environment, from ``cwd``, as PID 1 of a pid namespace of
   its own whose parent is the host's, not the container's: no process of the container (a kept service, root
   with Docker's capabilities) can see the command's processes, so none can reach its private folders through
   ``/proc/PID/root`` or ``/proc/PID/fd``, ptrace it or signal it; it gets a ``/proc`` of its own namespace;
4. every process of the container but PID 1 is frozen again (SIGSTOP), and the private copy of ``collect`` is
   written as a tar to the host file ``collect_tar``.
The outcome (the command's exit code, or the step that failed and why) goes to the host file ``status``.
"""

import ctypes
import glob
import json
import os
import signal
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 0x4000, 1 << 18
MNT_DETACH = 2
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
PR_CAPBSET_DROP, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 24, 22, 38
SECCOMP_MODE_FILTER = 2
PROC_MASKED = ("/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
               "/proc/sched_debug")
PROC_READONLY = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")


def main() -> int:
    cfg = json.loads(sys.argv[1])
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    status = os.open(cfg["status"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    collect_out = os.open(cfg["collect_tar"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) if cfg["collect"] else -1
    cgroups = [os.open(p, os.O_WRONLY) for p in cfg["cgroup_procs"]]

    def report(**fields: object) -> None:
        os.write(status, json.dumps(fields).encode())

    pid = cfg["pid"]
    names = ["ipc", "uts", *(["net"] if cfg["net"] == "container" else []), "mnt"]
    fds = {n: os.open(f"/proc/{pid}/ns/{n}", os.O_RDONLY) for n in [*names, "pid"]}
    for n in names:  # not the pid namespace: only the helpers below enter it (see run), never the command
        os.setns(fds[n], 0)
    os.chdir("/")
    guarded: list[bytes] = []
    made: list[str] = []
    for pattern in cfg["readonly"]:
        for path in sorted(glob.glob(pattern)) if "*" in pattern else [pattern]:
            if any(path == g.decode() or path.startswith(g.decode() + "/") for g in guarded):
                continue
            if not os.path.isdir(path) or os.path.islink(path):
                continue
            p = path.encode()
            if guard(libc, p, guarded) != 0:
                unguard(libc, guarded)
                report(step="setup", error=f"could not make {path} read-only: {os.strerror(ctypes.get_errno())}")
                return 1
    for path in cfg["readonly_files"]:  # the loader's preload list: held empty and read-only if absent
        if os.path.islink(path) or (os.path.exists(path) and not os.path.isfile(path)):
            continue
        if not os.path.exists(path):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
            made.append(path)
        guard(libc, path.encode(), guarded)
    try:
        return grade(cfg, libc, status, collect_out, cgroups, report, guarded, fds["pid"])
    finally:
        os.setns(fds["mnt"], 0)  # back in the container's mount namespace: the tools are writable again
        unguard(libc, guarded)
        for path in made:
            os.unlink(path)


def guard(libc: ctypes.CDLL, p: bytes, guarded: list[bytes]) -> int:
    if libc.mount(p, p, None, MS_BIND | MS_REC, None) != 0:
        return 0  # not mountable here (gone meanwhile): nothing to guard
    guarded.append(p)
    return libc.mount(None, p, None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)


def unguard(libc: ctypes.CDLL, guarded: list[bytes]) -> None:
    for p in reversed(guarded):
        libc.umount2(p, MNT_DETACH)


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_filter(libc: ctypes.CDLL, program: bytes) -> bool:
    """Install a seccomp filter (``struct sock_filter[]`` bytes) on this thread; ``no_new_privs`` must be set."""
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.addressof(buf))
    return libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) == 0


def grade(cfg: dict, libc: ctypes.CDLL, status: int, collect_out: int, cgroups: list[int], report, guarded: list[bytes],
          container_pids: int) -> int:
    os.unshare(CLONE_NEWNS | (CLONE_NEWNET if cfg["net"] == "isolated" else 0))
    if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        report(step="setup", error=f"mount --make-rprivate / failed: {os.strerror(ctypes.get_errno())}")
        return 1
    unguard(libc, guarded)  # in this namespace only: the command runs with the tools writable
    if cfg["net"] != "container":  # /sys/class/net of the network namespace the command is in
        libc.mount(b"sysfs", b"/sys", b"sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    env = {"PATH": cfg["bin"], "HOME": "/", "LC_ALL": "C"}
    sh = f"{cfg['bin']}/sh"

    def run(script: str, *args: str, stdout: int | None = None) -> int:
        """The toolset's sh in the container's pid namespace (its kill reaches the container's processes)."""
        child = os.fork()
        if child == 0:
            try:
                os.setns(container_pids, 0)  # for this process's children
                grandchild = os.fork()
                if grandchild == 0:
                    if stdout is not None:
                        os.dup2(stdout, 1)
                    os.execve(sh, [sh, "-c", script, "tackroom", *args], env)
                code = os.waitstatus_to_exitcode(os.waitpid(grandchild, 0)[1])
                os._exit(code if code >= 0 else 128 - code)
            finally:
                os._exit(127)
        return os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])

    if cfg["net"] == "isolated" and run("ip link set lo up") != 0:
        report(step="setup", error="could not bring up loopback in the grader's network namespace")
        return 1
    rc = run(cfg["setup_script"], *cfg["setup_args"]) if cfg["setup_script"] else 0
    if rc != 0:
        report(step="setup", exit=rc)
        return 1
    kept = [str(p) for p in cfg["kept"]]
    if kept:
        run("kill -CONT \"$@\" 2>/dev/null; exit 0", *kept)
    child = os.fork()
    if child == 0:
        try:
            os.unshare(CLONE_NEWPID)  # a child of the host's pid namespace (this process never joined the container's)
            init = os.fork()
            if init != 0:  # the command is PID 1 there: when it ends, the kernel ends whatever it left running
                code = os.waitstatus_to_exitcode(os.waitpid(init, 0)[1])
                os._exit(code if code >= 0 else 128 - code)
            if libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) != 0:
                os._exit(125)
            for path in PROC_MASKED:  # what Docker hides of /proc in its containers, hidden here too
                if os.path.exists(path):
                    libc.mount(b"/dev/null", path.encode(), None, MS_BIND, None)
            for path in PROC_READONLY:
                p = path.encode()
                if os.path.exists(path) and libc.mount(p, p, None, MS_BIND | MS_REC, None) == 0:
                    libc.mount(None, p, None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)
            for fd in cgroups:
                os.write(fd, b"0")  # this process (its pid here is 1, which the cgroup would read as its own)
            keep = int(cfg["cap_bounding"], 16)
            for cap in range(int(cfg["cap_last"]) + 1):
                if not keep >> cap & 1:
                    libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
            header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
            low, high = keep & 0xFFFFFFFF, keep >> 32
            data = (ctypes.c_uint32 * 6)(low, low, 0, high, high, 0)  # effective, permitted, inheritable (x2)
            if libc.capset(header, data) != 0 or libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                os._exit(126)
            if cfg["seccomp"] and not install_filter(libc, bytes.fromhex(cfg["seccomp"])):
                os._exit(126)
            try:
                os.chdir(cfg["cwd"])
            except OSError:
                os.chdir("/")
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            cmd_env = [f"{k}={v}" for k, v in cfg["env"].items()]
            os.execve(f"{cfg['bin']}/env", ["env", "-i", *cmd_env, *cfg["cmd"]], {})
        finally:
            os._exit(127)
    code = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    exit_code = code if code >= 0 else 128 - code
    if not cfg["collect"]:  # a plain command (exec after set_network): nothing to freeze or collect
        report(step="done", exit=exit_code)
        return 0
    # Freeze what runs: kept services and anything the command left behind (the runtime kills it later).
    run("kill -STOP -1 2>/dev/null; exit 0")
    packed = run('cd "$1" && tar -cf - .', cfg["collect"], stdout=collect_out)
    report(step="done", exit=exit_code, collect_exit=packed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
