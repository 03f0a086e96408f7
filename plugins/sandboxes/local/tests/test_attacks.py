"""Attacks on the ``local`` sandbox from inside real sandboxes and real trials (issue 18, items 1, 2, 3, 10).

Every test plays the agent: it runs commands inside a real bubblewrap sandbox, or a real trial whose
"solution" is the attack, and then looks at the host to see that nothing escaped. The host files the
attacks aim at are world-writable temporary files, so only the sandbox's isolation protects them.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

import tackroom
import tackroom_app
from tackroom import Trial
from tackroom_app import TrialPlugins, TrialRuntime
from tackroom_local import LocalSandbox, LocalSandboxProvider
from tackroom_local import limits as local_limits
from tackroom_local import sandbox as local_sandbox
from tackroom_local import view as local_view

SECRET = "host secret that no sandbox may read or change\n"


# -- fixtures and helpers ---------------------------------------------------------------


@pytest.fixture
def victim():
    """A host folder outside every sandbox root, writable by anyone: only isolation protects it."""
    d = Path(tempfile.mkdtemp(prefix="tackroom-victim-"))
    os.chmod(d, 0o777)
    (d / "secret.txt").write_text(SECRET)
    os.chmod(d / "secret.txt", 0o666)
    (d / "sub").mkdir(mode=0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def tree_state(root: Path) -> dict[str, object]:
    state: dict[str, object] = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        state[p.relative_to(root).as_posix()] = (
            os.readlink(p) if p.is_symlink() else "dir" if p.is_dir() else (p.read_bytes(), st.st_mode, st.st_mtime_ns)
        )
    return state


def host_file(path: str) -> tuple[bytes, int] | None:
    try:
        with open(path, "rb") as f:
            return f.read(), os.stat(path).st_mtime_ns
    except OSError:
        return None


@pytest.fixture
async def make(tmp_path):
    """Start local sandboxes whose roots live in the test's folder; all are stopped afterwards."""
    made: list[LocalSandbox] = []

    async def make(spec: dict | None = None, **options) -> LocalSandbox:
        provider = LocalSandboxProvider({"root_dir": str(tmp_path / "roots"), **options})
        sb = provider.create(tackroom.SandboxSpec(name="attack", **(spec or {})))
        made.append(sb)
        await sb.start()
        return sb

    yield make
    for sb in made:
        await sb.stop()


def ns_pids(sb: LocalSandbox) -> list[int]:
    """Host pids of every process in the sandbox's pid namespace."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.readlink(f"/proc/{entry.name}/ns/pid") == f"pid:[{sb.namespaces.pidns}]":
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def gone(pid: int) -> bool:
    """The process has exited (a zombie waiting for its reaper counts as gone)."""
    try:
        return status_field(pid, "State").startswith("Z")
    except OSError:
        return True


def status_field(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    raise KeyError(name)


# -- privileges -----------------------------------------------------------------------


async def test_an_exec_holds_no_capability_and_is_no_host_root(make):
    sb = await make()
    r = await sb.exec("grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status; id -u; "
                      "touch /app/made-inside; sleep 30 >/dev/null 2>&1 &")
    fields = dict(line.split(":\t") for line in r.stdout.splitlines() if ":\t" in line)
    assert {k: fields[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")} == dict.fromkeys(
        ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"), "0000000000000000"), fields
    assert fields["NoNewPrivs"] == "1" and r.stdout.splitlines()[-1] == "0", r.stdout
    # Seen from the host: every process of the sandbox, the keeper included, is unprivileged.
    pids = ns_pids(sb)
    assert len(pids) >= 2, pids
    expected_uid = str(sb.uid if os.geteuid() == 0 else os.getuid())
    for pid in pids:
        assert status_field(pid, "CapEff") == "0000000000000000", (pid, Path(f"/proc/{pid}/cmdline").read_bytes())
        assert status_field(pid, "CapBnd") == "0000000000000000"
        assert status_field(pid, "Uid").split()[0] == expected_uid
    if os.geteuid() == 0:
        assert sb.uid is not None and sb.uid >= local_sandbox.HOST_UID_BASE
        assert (sb.root / "app" / "made-inside").stat().st_uid == sb.uid, "root inside must not be root on the host"


async def test_mount_unshare_mknod_and_chown_cannot_regain_privileges(make):
    sb = await make()
    usr_before = sorted(os.listdir("/usr"))
    passwd_before = host_file("/etc/passwd")
    attempts = [
        "mount -o remount,rw /", "mount -o remount,rw /etc", "mount -o remount,rw /usr", "mount -o remount,rw,bind /usr",
        "mount -o remount,rw,bind /etc/passwd", "mount --bind /app /usr/bin", "mount -t tmpfs none /app",
        "umount /usr", "umount -l /etc/passwd", "unshare -U true", "unshare -Ur true", "unshare -m true",
        "unshare -p -f true", "unshare -n true", "unshare -Urm sh -c 'mount -o remount,rw,bind /usr && touch /usr/x'",
        "mknod /app/null c 1 3", "chown 1234 /app", "setpriv --reuid=1234 true", "nsenter -t 1 -m true",
        "python3 -c 'import os; os.setuid(1234)'", "python3 -c 'import os; os.chroot(\"/app\")'",
    ]  # fmt: skip
    for cmd in attempts:
        r = await sb.exec(cmd)
        assert not r.ok, f"{cmd!r} succeeded inside the sandbox: {r.stdout}{r.stderr}"
    mounts = (await sb.exec("grep -E ' /usr | /etc/passwd ' /proc/self/mounts")).stdout
    assert all(" ro," in line or " ro " in line for line in mounts.splitlines()) and mounts, mounts
    assert sorted(os.listdir("/usr")) == usr_before and host_file("/etc/passwd") == passwd_before


async def test_binaries_planted_on_the_tasks_path_never_run_while_capabilities_are_held(make):
    """nsenter hands the sandbox's user-namespace capabilities to what it starts: never a binary the agent wrote."""
    sb = await make(spec={"env": {"PATH": "/app/bin:/opt/bin:" + local_view.DEFAULT_PATH, "LD_LIBRARY_PATH": "/app/lib"}})
    r = await sb.exec("mkdir -p /app/bin /opt/bin && for b in setpriv env bash nsenter sh; do "
                      "printf '#!/bin/sh\\ngrep CapEff /proc/self/status > /app/pwned-%s\\nexec /usr/bin/%s \"$@\"\\n' $b $b "
                      "> /app/bin/$b; chmod +x /app/bin/$b; cp /app/bin/$b /opt/bin/$b; done")
    assert r.ok, r
    for _ in range(3):
        assert (await sb.exec("true")).ok
    await sb.kill_processes()
    assert (await sb.exec(["true"])).ok
    assert not list((sb.root / "app").glob("pwned-*")), "a planted binary ran as part of exec"


async def test_the_host_etc_usr_and_root_cannot_be_written(make):
    sb = await make()
    before = {p: host_file(p) for p in ("/etc/passwd", "/etc/hosts", "/etc/resolv.conf", "/usr/bin/true")}
    for cmd in ("echo pwned >> /etc/passwd", "echo pwned > /etc/hosts", "touch /etc/pwned", "touch /usr/pwned",
                "touch /usr/bin/pwned", "rm -f /usr/bin/true", "cp /usr/bin/true /usr/local/bin/pwned",
                "touch /pwned", "mkdir /var", "ln -s /app /pwned", "echo x > /.tackroom-keeper"):  # fmt: skip
        r = await sb.exec(cmd)
        assert not r.ok, f"{cmd!r} succeeded inside the sandbox"
    for path in ("/etc/pwned", "/usr/pwned", "/usr/bin/pwned", "/usr/local/bin/pwned", "/pwned"):
        assert not os.path.lexists(path), f"the sandbox created {path} on the host"
    assert {p: host_file(p) for p in before} == before


async def test_host_secrets_are_not_in_the_sandbox(make):
    sb = await make()
    for path in ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/sudoers", "/etc/sudoers.d", "/etc/ssh",
                 "/etc/ssl/private", "/etc/pip.conf", "/etc/npmrc", "/etc/environment", "/etc/profile.d",
                 "/etc/machine-id", "/sys", "/root/.ssh",
                 "/var/run/docker.sock", "/run"):  # fmt: skip
        r = await sb.exec(f"ls -d {path}")
        assert not r.ok, f"{path} is visible inside the sandbox"
    listed = set((await sb.exec("ls -A /etc")).stdout.split())
    allowed = {p.split("/")[0] for p in local_view.ETC_FILES} | set(local_view.ETC_LINKS)
    unexpected = {name for name in listed if not any(re.fullmatch(a.replace("*", ".*"), name) for a in allowed)}
    assert not unexpected, f"/etc holds more than the allow-list: {sorted(unexpected)}"
    assert "passwd" in listed and "ld.so.cache" in listed
    with pytest.raises(FileNotFoundError):
        await sb.read_file("/etc/shadow")


async def test_the_keeper_survives_signals_ptrace_and_kill_minus_one(make):
    sb = await make()
    r = await sb.exec(
        "for s in TERM INT HUP QUIT USR1 USR2 ALRM STOP KILL; do kill -$s 1; done; kill -9 -1; "
        "cat /proc/1/mem >/dev/null 2>&1 && echo READ-MEM; ls /proc/1/fd >/dev/null 2>&1 && echo READ-FD; "
        "python3 -c 'import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
        "print(\"ptrace\", libc.ptrace(16, 1, 0, 0), ctypes.get_errno())'; true"
    )
    assert "READ-MEM" not in r.stdout and "READ-FD" not in r.stdout, r.stdout
    assert "ptrace -1 1" in r.stdout, f"PTRACE_ATTACH to the keeper must fail with EPERM: {r.stdout!r}"
    await asyncio.sleep(0.2)
    assert sb.namespaces.proc is not None and sb.namespaces.proc.returncode is None, "the agent killed its sandbox's keeper"
    assert (await sb.exec("echo alive")).stdout == "alive\n"


# -- transfers ------------------------------------------------------------------------


async def test_planted_symlinks_at_every_transfer_destination_leave_the_host_untouched(make, victim, tmp_path):
    sb = await make()
    before = tree_state(victim)
    etc = {p: host_file(p) for p in ("/etc/passwd", "/etc/hosts", "/etc/hostname")}
    secret_file, escape = victim / "secret.txt", "../" * 12 + str(victim / "secret.txt").lstrip("/")
    plant = {
        "/tests/test.sh": secret_file, "/tests/helpers": victim, "/logs/verifier": victim, "/app/rel": escape,
        "/app/up-dir": victim, "/app/wf": secret_file, "/app/wf-parent": victim, "/app/dl": secret_file,
        "/app/dl-dir": victim, "/app/rf": secret_file, "/app/etc-link": "/etc", "/app/tree/abs": secret_file,
        "/app/tree/rel": escape, "/app/tree/dir": victim,
    }  # fmt: skip
    script = "mkdir -p /app/tree && echo ok > /app/tree/ok.txt && " + " && ".join(f"ln -sfn {t} {p}" for p, t in plant.items())
    assert (await sb.exec(script)).ok
    local = tmp_path / "local"
    (local / "tests" / "helpers").mkdir(parents=True)
    (local / "tests" / "test.sh").write_text("echo real tests\n")
    (local / "tests" / "helpers" / "h.txt").write_text("helper\n")
    payload = local / "payload.txt"
    payload.write_text("payload\n")

    # upload: a file onto a link, a folder whose entries are links, a file under a linked folder, a link climbing out
    await sb.upload(local / "tests", "/tests")
    await sb.upload(payload, "/app/rel")
    await sb.upload(local / "tests", "/app/up-dir")
    await sb.upload(payload, "/logs/verifier/reward.txt")
    await sb.upload(payload, "/app/etc-link/pwned")  # a parent link into read-only /etc is replaced, never followed
    await sb.write_file("/app/wf", "written\n")
    await sb.write_file("/app/wf-parent/new.txt", "written\n")
    assert tree_state(victim) == before, "an upload wrote to the host through a planted link"
    assert not os.path.lexists("/etc/pwned")
    r = await sb.exec("for p in /tests/test.sh /tests/helpers /logs/verifier /app/rel /app/up-dir /app/wf /app/wf-parent "
                      "/app/etc-link; "
                      "do [ -L $p ] && echo LINK $p; done; cat /tests/test.sh /tests/helpers/h.txt /app/rel "
                      "/app/up-dir/test.sh /logs/verifier/reward.txt /app/wf /app/wf-parent/new.txt /app/etc-link/pwned")
    assert "LINK" not in r.stdout, f"a planted link survived as the destination: {r.stdout}"
    assert r.stdout.split("\n")[:8] == ["echo real tests", "helper", "payload", "echo real tests", "payload", "written",
                                        "written", "payload"], r.stdout  # fmt: skip

    # download: a link to a host file, to a host folder, a folder holding links out, read_file through a link
    results = {}
    for name in ("dl", "dl-dir", "tree", "rf"):
        dest = tmp_path / "downloads" / name
        try:
            await sb.download(f"/app/{name}", dest)
            results[name] = "ok"
        except (FileNotFoundError, tackroom.SandboxPathError) as exc:
            results[name] = type(exc).__name__
    assert results == {"dl": "FileNotFoundError", "dl-dir": "FileNotFoundError", "tree": "ok", "rf": "FileNotFoundError"}
    with pytest.raises(FileNotFoundError):
        await sb.read_file("/app/rf")
    downloaded = tmp_path / "downloads"
    assert [p for p in downloaded.rglob("*") if p.is_symlink()] == [], "a download created a link on the host"
    assert sorted(p.relative_to(downloaded).as_posix() for p in downloaded.rglob("*")) == ["tree", "tree/ok.txt"]
    assert tree_state(victim) == before and {p: host_file(p) for p in etc} == etc


async def test_downloads_keep_links_that_stay_inside_and_drop_the_rest(make, tmp_path):
    sb = await make()
    r = await sb.exec("mkdir -p /app/t/a/b && cd /app/t && echo x > a/b/f && ln -s a/b/f down && ln -s ../f a/b/up-ok "
                      "&& ln -s ../../../f a/b/up-out && ln -s a/../../f sneaky && ln -s /app/t/a/b/f absolute "
                      "&& ln -s . self && ln -s .. parent")
    assert r.ok, r.stderr
    await sb.download("/app/t", tmp_path / "t")
    links = {p.relative_to(tmp_path / "t").as_posix(): os.readlink(p) for p in (tmp_path / "t").rglob("*") if p.is_symlink()}
    assert links == {"down": "a/b/f", "a/b/up-ok": "../f", "self": "."}, links
    for p in (tmp_path / "t").rglob("*"):
        real = os.path.realpath(p)
        assert real == str(tmp_path / "t") or real.startswith(str(tmp_path / "t") + "/"), (p, real)


async def test_fifos_and_sockets_are_replaced_on_upload_and_never_opened_on_download(make, tmp_path):
    sb = await make()
    r = await sb.exec("mkfifo /app/fifo /app/dir-fifo && mkdir -p /app/d && mkfifo /app/d/pipe && echo f > /app/d/f && "
                      "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.bind(\"/app/sock\")'")
    assert r.ok, r.stderr
    started = time.monotonic()
    for path in ("/app/fifo", "/app/sock"):
        with pytest.raises(tackroom.SandboxPathError, match="fifo|socket"):
            await sb.download(path, tmp_path / "x", timeout=5)
    await sb.download("/app/d", tmp_path / "d", timeout=5)
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["f"], "a fifo inside a folder must be skipped"
    assert time.monotonic() - started < 5, "a download blocked on a fifo"
    payload = tmp_path / "p.txt"
    payload.write_text("p\n")
    await sb.upload(payload, "/app/fifo", timeout=5)
    await sb.write_file("/app/sock", "s\n")
    r = await sb.exec("[ -f /app/fifo ] && [ ! -p /app/fifo ] && [ -f /app/sock ] && cat /app/fifo /app/sock")
    assert r.stdout == "p\ns\n", r


async def test_transfers_racing_an_agent_that_swaps_links_never_reach_the_host(make, victim, tmp_path):
    sb = await make()
    before = tree_state(victim)
    # The agent flips /app/race/d between a folder, a link to the host folder, a link into /etc and a fifo.
    await sb.exec(textwrap.dedent(f"""\
        mkdir -p /app/race
        (cd /app/race; while :; do
            rm -rf d; mkdir d; echo inside > d/x
            rm -rf d; ln -s {victim} d
            rm -rf d; ln -s /etc d
            rm -rf d; mkdir d; ln -s {victim}/secret.txt d/x
            rm -rf d; mkfifo d
        done) >/dev/null 2>&1 &
        """))
    payload = tmp_path / "p.txt"
    payload.write_text("p\n")
    folder = tmp_path / "folder"
    (folder / "in").mkdir(parents=True)
    (folder / "in" / "x").write_text("x\n")
    outcomes: dict[str, int] = {}
    deadline = time.monotonic() + 4
    i = 0
    while time.monotonic() < deadline:
        i += 1
        op = i % 5
        try:
            if op == 0:
                await sb.upload(payload, "/app/race/d/x", timeout=10)
            elif op == 1:
                await sb.upload(folder, "/app/race/d", timeout=10)
            elif op == 2:
                await sb.download("/app/race/d", tmp_path / f"dl-{i}", timeout=10)
            elif op == 3:
                data = await sb.read_file("/app/race/d/x", timeout=10)
                assert SECRET.encode() not in data
            else:
                await sb.write_file("/app/race/d/x", "w\n", timeout=10)
            outcomes["ok"] = outcomes.get("ok", 0) + 1
        except (tackroom.SandboxError, FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            outcomes[type(exc).__name__] = outcomes.get(type(exc).__name__, 0) + 1
    await sb.kill_processes()
    assert outcomes.get("ok", 0) > 20, outcomes  # the race was real: most transfers went through
    assert tree_state(victim) == before, f"a transfer raced into the host folder ({outcomes})"
    for dl in tmp_path.glob("dl-*"):
        for p in [dl, *dl.rglob("*")]:
            if p.is_symlink():
                real = os.path.realpath(p)
                assert real.startswith(str(dl) + "/"), f"a download made a link out of its folder: {p} -> {real}"
            elif p.is_file():
                assert SECRET.encode() not in p.read_bytes(), f"{p} holds the host secret"


# -- kill_processes -------------------------------------------------------------------


async def test_kill_processes_kills_every_kind_of_agent_process_fast(make, tmp_path):
    sb = await make()
    writer = "while :; do echo {tag} >> /app/log; sleep 0.02; done"
    script = textwrap.dedent(f"""\
        echo kept > /app/kept.txt
        ({writer.format(tag='bg')}) >/dev/null 2>&1 &
        setsid bash -c '({writer.format(tag='double-fork')}) >/dev/null 2>&1 & exit 0' >/dev/null 2>&1 &
        nohup bash -c '{writer.format(tag='nohup')}' >/dev/null 2>&1 &
        bash -c 'trap "" TERM HUP INT USR1; {writer.format(tag='ignores-term')}' >/dev/null 2>&1 &
        tmux new-session -d -s agent "{writer.format(tag='tmux')}"
        sleep 1000 >/dev/null 2>&1 & echo $!
        """)
    r = await sb.exec(script)
    assert r.ok, r
    # a stopped process is one kind to kill; the stop lands when the kernel next schedules it (`R` until then on a
    # loaded machine), so its state is read until it shows
    pid = r.stdout.split()[-1]
    stopped = await sb.exec(f"kill -STOP {pid}; for i in $(seq 100); do s=$(ps -o stat= -p {pid}); "
                            f"case $s in T*) break;; esac; sleep 0.05; done; echo $s")
    assert stopped.stdout.strip().startswith("T"), stopped
    for _ in range(100):
        if set((await sb.exec("sort -u /app/log")).stdout.split()) >= {"bg", "double-fork", "nohup", "ignores-term", "tmux"}:
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("the writers did not all start")
    old = ns_pids(sb)
    assert len(old) >= 8, old
    await sb.kill_processes()
    assert not [p for p in old if os.path.exists(f"/proc/{p}")], "processes of the old namespace survived"
    size = (await sb.exec("wc -c < /app/log")).stdout
    await asyncio.sleep(0.3)
    assert (await sb.exec("wc -c < /app/log")).stdout == size, "something still writes after kill_processes()"
    r = await sb.exec("cat /app/kept.txt; tmux ls 2>&1")
    assert r.stdout.splitlines()[0] == "kept" and "no server" in r.stdout, r.stdout
    assert ns_pids(sb) == [sb.namespaces.keeper_pid], "only the fresh keeper may run"
    if sb.namespaces.cgroups is not None:
        assert sb.namespaces.cgroups.pids() == {sb.namespaces.proc.pid, sb.namespaces.keeper_pid}, "the cgroup holds more than bwrap and its keeper"
    times = []
    for _ in range(20):
        await sb.exec("sleep 1000 >/dev/null 2>&1 & setsid sleep 1000 >/dev/null 2>&1 &")
        started = time.monotonic()
        await sb.kill_processes()
        times.append(time.monotonic() - started)
    median = statistics.median(times)
    print(f"kill_processes: median {median * 1000:.1f} ms, max {max(times) * 1000:.1f} ms over 20 calls")
    assert median < 0.1, f"kill_processes() took a median {median * 1000:.0f} ms; it must stay well under 100 ms"
    assert (await sb.exec("ps -e -o comm= | grep -c sleep; true")).stdout.strip() == "0"


async def test_a_fork_bomb_stays_bounded_and_the_sandbox_stoppable(make):
    sb = await make(pids_limit=64)
    assert sb.namespaces.cgroups is not None, "this host has writable cgroups; the bomb must be bounded by one"
    host_pids = next(d for d in sb.namespaces.cgroups.dirs if (d / "pids.max").exists())
    assert (host_pids / "pids.max").read_text().strip() == "64"
    # `ulimit -u` is a second fence in case the cgroup did not hold; the assertions check the cgroup did.
    await sb.exec("ulimit -u 400; (bomb() { bomb | bomb & }; bomb) >/dev/null 2>&1 </dev/null & exit 0", timeout=30)
    peak = 0
    for _ in range(20):
        await asyncio.sleep(0.1)
        peak = max(peak, len(ns_pids(sb)), int((host_pids / "pids.current").read_text()))
    assert 32 <= peak <= 64, f"the fork bomb reached {peak} processes (limit 64)"
    started = time.monotonic()
    await sb.kill_processes(timeout=10)
    assert time.monotonic() - started < 5
    assert (await sb.exec("echo usable")).stdout == "usable\n"
    bwrap = sb.namespaces.proc.pid
    await sb.stop()
    assert not os.path.exists(f"/proc/{bwrap}") and not sb.root.exists()


async def test_memory_beyond_memory_mb_cannot_be_allocated(make):
    sb = await make(spec={"memory_mb": 128})
    small = await sb.exec("python3 -c 'b = bytearray(32 * 2**20); print(len(b))'")
    assert small.ok and small.stdout.strip() == str(32 * 2**20), small
    big = await sb.exec("python3 -c 'b = bytearray(400 * 2**20); b[::4096] = b\"x\" * (len(b) // 4096); print(\"got it\")'")
    assert not big.ok and "got it" not in big.stdout, big
    assert (await sb.exec("echo alive")).stdout == "alive\n"


async def test_without_cgroups_rlimits_enforce_the_limits_and_the_notes_say_so(make):
    sb = await make(spec={"memory_mb": 128}, pids_limit=24, limits="rlimit")
    assert sb.namespaces.cgroups is None and any("RLIMIT_AS" in n and "not enforced" in n for n in sb.notes), sb.notes
    r = await sb.exec("for i in $(seq 1 40); do sleep 30 & echo -n .; done 2>/dev/null")
    assert 0 < len(r.stdout) < 24, f"{len(r.stdout)} of 40 processes started under pids_limit=24"
    big = await sb.exec("python3 -c 'b = bytearray(400 * 2**20); print(\"got it\")'")
    assert not big.ok and "MemoryError" in big.stderr, big
    await sb.kill_processes()
    assert (await sb.exec("echo alive")).stdout == "alive\n"


async def test_limits_cgroup_refuses_to_start_without_a_writable_cgroup(tmp_path, monkeypatch):
    monkeypatch.setattr(local_limits, "make_cgroups", lambda *a: (None, [], "simulated: /sys/fs/cgroup is read-only"))
    roots = tmp_path / "roots"
    sb = LocalSandboxProvider({"root_dir": str(roots), "limits": "cgroup"}).create(
        tackroom.SandboxSpec(name="t", memory_mb=300))
    with pytest.raises(tackroom.SandboxError, match=r"memory_mb=300.*pids_limit=512.*read-only"):
        await sb.start()
    assert not any(roots.iterdir()), "a refused sandbox leaves nothing behind"


# -- cleanup after kill -9 ------------------------------------------------------------

OWNER = """
import asyncio, json, sys
import tackroom
from tackroom_local import LocalSandboxProvider

async def main():
    sb = LocalSandboxProvider({"root_dir": sys.argv[1]}).create(tackroom.SandboxSpec(name="leaky"))
    await sb.start()
    await sb.exec("sleep 1000 >/dev/null 2>&1 &")
    cgroups = [str(d) for d in sb.namespaces.cgroups.dirs] if sb.namespaces.cgroups else []
    print(json.dumps({"root": str(sb.root), "marker": str(sb.marker), "bwrap": sb.namespaces.proc.pid, "cgroups": cgroups}),
          flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def cleanup_cli(roots: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "tackroom_app", "sandbox", "cleanup", "--sandbox", "local",
                          "--option", f"root_dir={roots}", "--json"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


async def test_cleanup_removes_what_a_sigkilled_run_leaked_and_never_a_live_run(make, tmp_path):
    roots = tmp_path / "roots"
    live = await make()
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(roots)], stdout=subprocess.PIPE, text=True)
    try:
        leaked = json.loads(owner.stdout.readline())
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    assert Path(leaked["root"]).is_dir() and Path(leaked["marker"]).is_file()
    assert cleanup_cli(roots) == {"sandbox": "local", "removed": 1}
    assert not Path(leaked["root"]).exists() and not Path(leaked["marker"]).exists()
    assert not [d for d in leaked["cgroups"] if os.path.exists(d)], "the leaked sandbox's cgroups are left"
    for _ in range(50):
        if not os.path.exists(f"/proc/{leaked['bwrap']}"):
            break
        await asyncio.sleep(0.1)
    assert not os.path.exists(f"/proc/{leaked['bwrap']}"), "the leaked bwrap still runs"
    # The live run's sandbox is untouched and still works.
    assert live.root.is_dir() and live.marker.is_file()
    assert (await live.exec("echo live")).stdout == "live\n"
    assert cleanup_cli(roots) == {"sandbox": "local", "removed": 0}


async def test_the_cgroups_of_a_sigkilled_run_are_swept_by_the_next_sandbox_wherever_its_root_was(tmp_path):
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path / "elsewhere")], stdout=subprocess.PIPE, text=True)
    try:
        leaked = json.loads(owner.stdout.readline())
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    if not leaked["cgroups"]:
        pytest.skip("no writable cgroups on this host: nothing to sweep")
    assert all(os.path.isdir(d) for d in leaked["cgroups"])
    sb = LocalSandboxProvider({"root_dir": str(tmp_path / "roots")}).create(tackroom.SandboxSpec(name="next"))
    async with sb:
        assert not [d for d in leaked["cgroups"] if os.path.exists(d)], "a killed run's cgroups outlived the next start"
        assert Path(leaked["root"]).is_dir(), "its root is another root_dir's business (tackroom sandbox cleanup)"


async def test_cleanup_kills_a_bwrap_that_outlived_its_owner(make, tmp_path):
    sb = await make()
    await sb.exec("sleep 1000 >/dev/null 2>&1 &")
    dead = subprocess.Popen(["true"])
    dead.wait()
    data = json.loads(sb.marker.read_text())
    data.update(pid=dead.pid, start_time=1)  # the process that made it is gone
    sb.marker.write_text(json.dumps(data))
    bwrap, keeper = sb.namespaces.proc, sb.namespaces.keeper_pid
    assert await LocalSandboxProvider({"root_dir": str(tmp_path / "roots")}).cleanup() == 1
    await asyncio.wait_for(bwrap.wait(), 10)
    for _ in range(50):  # dead, then reaped by the host's init
        if gone(keeper):
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("the keeper of the leaked sandbox still runs")
    assert not sb.root.exists() and not sb.marker.exists()
    if sb.namespaces.cgroups is not None:
        assert not [d for d in sb.namespaces.cgroups.dirs if d.exists()]
    with pytest.raises(tackroom.SandboxError):
        await sb.exec("true")


# -- a real trial whose agent attacks -------------------------------------------------


async def test_a_real_trial_whose_agent_plants_links_forks_writers_and_remounts_gets_reward_zero(tmp_path, victim):
    before = tree_state(victim)
    usr_before = sorted(os.listdir("/usr"))
    task_dir = tmp_path / "task"
    for sub in ("tests/helpers", "solution"):
        (task_dir / sub).mkdir(parents=True)
    (task_dir / "instruction.md").write_text("make /app/answer.txt say 42")
    (task_dir / "task.toml").write_text("[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 30\n")
    (task_dir / "tests" / "helpers" / "expected.txt").write_text("42\n")
    (task_dir / "tests" / "test.sh").write_text(textwrap.dedent("""\
        if cmp -s /app/answer.txt /tests/helpers/expected.txt; then r=1; else r=0; fi
        sleep 0.5; echo $r > /logs/verifier/reward.txt; sleep 0.5
        """))
    (task_dir / "solution" / "solve.sh").write_text(textwrap.dedent(f"""\
        echo wrong > /app/answer.txt
        ln -sfn {victim}/secret.txt /tests/test.sh
        ln -sfn {victim} /tests/helpers
        rm -rf /logs/verifier; ln -sfn {victim} /logs/verifier
        mount -o remount,rw /usr 2>/dev/null && touch /usr/pwned
        echo pwned > {victim}/secret.txt 2>/dev/null
        # writers that wake once the verifier has uploaded the real tests (after the agent's turn)
        cheat='while :; do if [ -f /tests/test.sh ] && [ ! -L /tests/test.sh ]; then echo 42 > /app/answer.txt; echo 1 > /logs/verifier/reward.txt; fi; sleep 0.01; done'
        setsid bash -c "($cheat) & exit 0" >/dev/null 2>&1 </dev/null &
        nohup bash -c "trap '' TERM HUP; $cheat" >/dev/null 2>&1 &
        sleep 0.3
        exit 0
        """))
    task = tackroom.load_task(task_dir)
    manager = tackroom_app.PluginManager()
    OracleHarness, TestScriptVerifier = manager.get("harness", "oracle"), manager.get("verifier", "test-script")
    trial = Trial(task_id=task.id, task_path=str(task.path), harness="oracle", sandbox="local", verifier="test-script")
    plugins = TrialPlugins(OracleHarness, OracleHarness.Options(), LocalSandboxProvider({"root_dir": str(tmp_path / "roots")}),
                           TestScriptVerifier, TestScriptVerifier.Options())  # fmt: skip
    rt = TrialRuntime(tmp_path / "run", progress=False, manager=manager, retry_backoff_sec=0.01)
    result = await rt.run_trial(trial, task, plugins)
    assert result.error is None, result.error
    assert result.reward == 0.0, "the agent's writers outlived its turn, or its planted files were graded"
    assert "kill_agent" in result.timings
    assert tree_state(victim) == before, "the trial changed the host folder the agent's links pointed at"
    assert sorted(os.listdir("/usr")) == usr_before
    assert not any((tmp_path / "roots").iterdir()), "the trial left its sandbox behind"
