"""Attacks from inside real docker sandboxes: what an agent plants must not redirect a transfer, outlive
kill_processes(), or get past the limits. The agent is root in its container and an RL trainer optimises
toward every hole, so each test plays the agent and then checks the host, the container and the sandbox.

The tests at the end (no docker) feed the host-side extractor archives that `docker cp` would never
produce, the way a compromised engine or a remote sandbox could.
"""

from __future__ import annotations

import asyncio
import io
import statistics
import subprocess
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from tackroom import SandboxError, SandboxPathError, SandboxSpec, cache_root
from tackroom_docker import DockerProvider
from tackroom_docker.sandbox import DockerSandbox
from tackroom_sandbox_kit import extract_tar

docker = pytest.mark.docker

PASSWD_FIRST_LINE = "root:x:0:0:root:/root:/bin/bash"


def new_spec(**kw) -> SandboxSpec:
    return SandboxSpec(name=f"attack-{uuid.uuid4().hex[:8]}", **kw)


@pytest.fixture
async def sandbox(provider):
    sb = provider.create(new_spec())
    await sb.start()
    try:
        yield sb
    finally:
        await sb.stop()


async def sh(sb: DockerSandbox, cmd: str, timeout: float = 60) -> str:
    """Run as the agent would; a failure is a broken test, not an attack that worked."""
    r = await sb.exec(cmd, timeout=timeout)
    assert r.ok, f"{cmd!r} exited {r.exit_code}: {r.stderr}"
    return r.stdout


@pytest.fixture
def host_canary(tmp_path: Path) -> Path:
    """A host file an attack would like to overwrite; links in the container point at the same path."""
    canary = tmp_path / "canary" / "host-secret.txt"
    canary.parent.mkdir()
    canary.write_text("host original\n")
    return canary


def _host_untouched(canary: Path) -> None:
    assert canary.read_text() == "host original\n", "a host file outside the destination was written"
    assert sorted(p.name for p in canary.parent.iterdir()) == ["host-secret.txt"], "a file appeared beside the host canary"


# -- uploads and write_file: a planted link or special file at the destination -----------------------------------


@docker
async def test_upload_of_a_file_replaces_a_planted_link_instead_of_writing_through_it(sandbox, tmp_path, host_canary):
    await sh(sandbox, f"mkdir -p /tests {host_canary.parent} && ln -s /etc/passwd /tests/test.sh && "
                      f"ln -s {host_canary} /tests/host.txt")  # fmt: skip
    script = tmp_path / "test.sh"
    script.write_text("echo graded\n")
    await sandbox.upload(script, "/tests/test.sh")
    await sandbox.upload(script, "/tests/host.txt")
    out = await sh(sandbox, "stat -c %F /tests/test.sh /tests/host.txt; cat /tests/test.sh; head -1 /etc/passwd")
    assert out == f"regular file\nregular file\necho graded\n{PASSWD_FIRST_LINE}\n"
    _host_untouched(host_canary)


@docker
async def test_write_file_replaces_a_planted_link_or_fifo(sandbox, host_canary):
    await sh(sandbox, f"mkdir -p /app && ln -s /etc/passwd /app/answer.txt && mkfifo /app/pipe && "
                      f"ln -s {host_canary} /app/host.txt")  # fmt: skip
    await asyncio.wait_for(sandbox.write_file("/app/answer.txt", "42\n"), 30)
    await asyncio.wait_for(sandbox.write_file("/app/pipe", "not blocked\n"), 30)  # a FIFO would block a writer
    await asyncio.wait_for(sandbox.write_file("/app/host.txt", "x"), 30)
    out = await sh(sandbox, "stat -c %F /app/answer.txt /app/pipe /app/host.txt; cat /app/answer.txt /app/pipe; head -1 /etc/passwd")
    assert out == f"regular file\nregular file\nregular file\n42\nnot blocked\n{PASSWD_FIRST_LINE}\n"
    _host_untouched(host_canary)


@docker
async def test_upload_of_a_directory_replaces_a_planted_directory_link(sandbox, tmp_path):
    """The verifier uploads into /logs/verifier; the agent made it a link to a directory it wants written."""
    await sh(sandbox, "mkdir -p /logs /victim && ln -s /victim /logs/verifier")
    src = tmp_path / "verifier"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "result.json").write_text("{}")
    await sandbox.upload(src, "/logs/verifier")
    out = await sh(sandbox, "stat -c %F /logs/verifier; cat /logs/verifier/sub/result.json; echo; ls -A /victim | wc -l")
    assert out == "directory\n{}\n0\n"


@docker
async def test_links_planted_inside_an_upload_directory_are_replaced_not_followed(sandbox, tmp_path):
    await sh(sandbox, "mkdir -p /tests /victim && ln -s /victim /tests/sub && ln -s /etc/passwd /tests/run.sh")
    src = tmp_path / "tests"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "data.txt").write_text("data")
    (src / "run.sh").write_text("echo run\n")
    await sandbox.upload(src, "/tests")
    out = await sh(sandbox, "stat -c %F /tests/sub /tests/run.sh; cat /tests/sub/data.txt; echo; ls -A /victim | wc -l; head -1 /etc/passwd")
    assert out == f"directory\nregular file\ndata\n0\n{PASSWD_FIRST_LINE}\n"


@docker
async def test_an_upload_through_a_planted_parent_link_is_refused(sandbox, tmp_path):
    await sh(sandbox, "mkdir -p /victim && ln -s /victim /tests && mkdir -p /logs && ln -s /victim /logs/verifier")
    local = tmp_path / "test.sh"
    local.write_text("echo graded\n")
    with pytest.raises(SandboxPathError, match="/tests is a symbolic link") as caught:
        await sandbox.upload(local, "/tests/test.sh")
    # planted during the trial: the agent's doing, graded 0, not a task error that would drop the trial
    assert caught.value.error_class == "model" and "made during the trial" in str(caught.value)
    with pytest.raises(SandboxPathError, match="/logs/verifier is a symbolic link") as caught:
        await sandbox.write_file("/logs/verifier/reward.txt", "1")
    assert caught.value.error_class == "model"
    assert await sh(sandbox, "ls -A /victim | wc -l") == "0\n"
    # the image's own links (merged /usr) are refused too, but as the task's (or caller's) problem
    with pytest.raises(SandboxPathError, match="/bin is a symbolic link") as caught:
        await sandbox.upload(local, "/bin/graded")
    assert caught.value.error_class == "task"
    with pytest.raises(SandboxPathError, match="symbolic link") as caught:
        await sandbox.read_file("/etc/os-release")
    assert caught.value.error_class == "task"


@docker
async def test_a_file_upload_over_a_directory_is_refused_not_a_deletion(sandbox, tmp_path):
    await sh(sandbox, "mkdir -p /app/work && echo keep > /app/work/file")
    local = tmp_path / "f"
    local.write_text("x")
    with pytest.raises(IsADirectoryError):
        await sandbox.upload(local, "/app/work")
    assert await sh(sandbox, "cat /app/work/file") == "keep\n"


# -- downloads and read_file ---------------------------------------------------------------------------------------


@docker
async def test_read_file_refuses_a_planted_link_a_link_above_it_and_a_fifo(sandbox):
    await sh(sandbox, "mkdir -p /app /logs && ln -s /etc/passwd /app/answer.txt && ln -s /etc /logs/verifier && mkfifo /app/pipe")
    with pytest.raises(SandboxPathError, match="symbolic link") as caught:
        await sandbox.read_file("/app/answer.txt")
    assert caught.value.error_class == "model"
    with pytest.raises(SandboxPathError, match="/logs/verifier is a symbolic link"):
        await sandbox.read_file("/logs/verifier/passwd")
    with pytest.raises(SandboxPathError, match="not a regular file") as caught:
        await asyncio.wait_for(sandbox.read_file("/app/pipe"), 30)
    assert caught.value.error_class == "model"
    await sh(sandbox, "echo fine > /app/real.txt")
    assert await sandbox.read_file("/app/real.txt") == b"fine\n"


@docker
async def test_download_of_a_file_replaces_a_host_link_at_the_destination(sandbox, tmp_path, host_canary):
    """A link at the host destination (left by an earlier download, say) is replaced, never written through."""
    await sh(sandbox, "mkdir -p /app && echo from-sandbox > /app/out.txt")
    dest = tmp_path / "downloads" / "out.txt"
    dest.parent.mkdir()
    dest.symlink_to(host_canary)
    await sandbox.download("/app/out.txt", dest)
    assert not dest.is_symlink() and dest.read_text() == "from-sandbox\n"
    _host_untouched(host_canary)


@docker
async def test_download_of_a_directory_keeps_nothing_that_leads_out(sandbox, tmp_path, host_canary):
    outside = host_canary.parent
    await sh(sandbox, f"""set -e
        mkdir -p /app/out/sub {outside}
        echo real > /app/out/sub/file.txt
        ln -s {host_canary} /app/out/abs-host        # absolute, at the host canary's own path
        ln -s ../../../../../../{host_canary} /app/out/rel-up
        ln -s .. /app/out/sub/parent                 # inside the tree, but '..': could lead out after a merge
        ln -s file.txt /app/out/sub/alias            # relative, below its directory: kept
        ln /app/out/sub/file.txt /app/out/hard       # a hard link: becomes a copy
        mkfifo /app/out/pipe
    """)  # fmt: skip
    dest = tmp_path / "dl"
    (dest / "sub").mkdir(parents=True)
    (dest / "hard").symlink_to(host_canary)  # a host link where the archive has a file: replaced, not written through
    await sandbox.download("/app/out", dest)
    found = sorted(str(p.relative_to(dest)) for p in dest.rglob("*"))
    assert found == ["hard", "sub", "sub/alias", "sub/file.txt"], found
    assert (dest / "sub" / "alias").is_symlink() and (dest / "sub" / "alias").read_text() == "real\n"
    assert not (dest / "hard").is_symlink() and (dest / "hard").read_text() == "real\n"
    for p in dest.rglob("*"):
        assert p.resolve().is_relative_to(dest.resolve()), f"{p} leads out of the destination"
    _host_untouched(host_canary)


@docker
async def test_a_download_merged_into_a_tree_with_host_links_writes_only_below_dest(sandbox, tmp_path, host_canary):
    await sh(sandbox, "mkdir -p /app/out/sub && echo sandbox > /app/out/sub/host-secret.txt")
    dest = tmp_path / "dl"
    dest.mkdir()
    (dest / "sub").symlink_to(host_canary.parent, target_is_directory=True)  # a link where the archive has a directory
    await sandbox.download("/app/out", dest)
    assert not (dest / "sub").is_symlink()
    assert (dest / "sub" / "host-secret.txt").read_text() == "sandbox\n"
    _host_untouched(host_canary)


@docker
async def test_snapshot_ignores_what_the_agent_planted_at_the_default_staging_path(sandbox):
    """The base snapshot() stages /tmp/.tackroom-snapshot.tar in the sandbox; docker's streams instead."""
    await sh(sandbox, "mkdir -p /app && echo a > /app/a.txt && mkfifo /tmp/.tackroom-snapshot.tar && "
                      "mkdir -p /victim && ln -s /victim /app/linked-dir")  # fmt: skip
    data = await asyncio.wait_for(sandbox.snapshot(["/app/a.txt", "/app/linked-dir/x", "/nope"]), 30)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert tar.getnames() == ["app/a.txt"]
    assert await sh(sandbox, "stat -c %F /tmp/.tackroom-snapshot.tar") == "fifo\n"


# -- kill_processes ------------------------------------------------------------------------------------------------

LIVE = r"""for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = $$ ] && continue
  read -r l < $d/stat 2>/dev/null || continue; set -- ${l##*) }; [ "$1" = Z ] && continue
  c=${l#*(}; echo "$p ${c%)*} ppid=$2"; done"""


WRITERS = ("bg", "nohup", "setsid", "deaf", "noenv", "nobody", "daemon")


def _loop(tag: str) -> str:
    return f"while :; do echo {tag} >> /tmp/w/{tag}.log; sleep 0.1; done"


async def _plant_writers(sb: DockerSandbox) -> None:
    """Every way an agent could leave something running that writes after its turn."""
    await sh(sb, f"""set -e; mkdir -p /app /tmp/w; chmod 1777 /tmp/w; exec </dev/null >/dev/null 2>&1
        (sleep 60; echo ok > /app/x) &
        ({_loop("bg")}) &
        nohup sh -c '{_loop("nohup")}' &
        setsid sh -c '({_loop("setsid")}) &'
        setsid sh -c 'trap "" TERM HUP INT; {_loop("deaf")}' &
        env -i /bin/sh -c '{_loop("noenv")}' &
        setpriv --reuid=65534 --regid=65534 --clear-groups sh -c '{_loop("nobody")}' &
        # a daemon the way tmux starts its server: fork, setsid, fork again, the middle one exits
        setsid sh -c 'sh -c "{_loop("daemon")}" & exit 0' &
        true""")  # fmt: skip
    for _ in range(100):
        if set((await sh(sb, "ls /tmp/w")).split()) == {f"{tag}.log" for tag in WRITERS}:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the writers did not all start: {await sh(sb, 'ls /tmp/w')}")


async def _assert_writers_stopped(sb: DockerSandbox) -> None:
    sizes = await sh(sb, "wc -c /tmp/w/*.log")
    await asyncio.sleep(0.6)
    assert await sh(sb, "wc -c /tmp/w/*.log") == sizes, "a writer still writes after kill_processes()"
    assert await sh(sb, "ls -A /app") == "", "the sleeping writer wrote /app/x"


@docker
async def test_kill_processes_kills_background_setsid_nohup_and_daemonised_writers(sandbox):
    await _plant_writers(sandbox)
    await sandbox.kill_processes()
    live = (await sh(sandbox, LIVE)).splitlines()
    assert [line.split()[1] for line in live] == ["sh", "sleep"], f"left alive: {live}"  # PID 1 and its sleep
    assert live[0].startswith("1 "), live
    await _assert_writers_stopped(sandbox)
    assert await sh(sandbox, "echo usable") == "usable\n"
    await sandbox.write_file("/app/after.txt", "ok")
    assert await sandbox.read_file("/app/after.txt") == b"ok"


def _tmux_debs() -> list[Path]:
    found = sorted((cache_root() / "debs" / "debian-bookworm-amd64").glob("*.deb"))
    if not any(p.name.startswith("tmux_") for p in found):
        pytest.skip("no cached tmux .deb (the terminus harness's tmux_install caches one on Debian hosts)")
    return found


@docker
async def test_kill_processes_kills_a_tmux_server_and_dpkg_works_with_the_hardening(sandbox):
    for deb in _tmux_debs():
        await sandbox.upload(deb, f"/tmp/debs/{deb.name}")
    await sh(sandbox, "dpkg -i /tmp/debs/*.deb >/dev/null && rm -rf /tmp/debs", timeout=120)
    await sh(sandbox, "mkdir -p /app && tmux new-session -d -s agent 'while :; do date +%s%N >> /app/tmux.log; sleep 0.05; done'")
    await asyncio.sleep(0.5)
    assert "tmux" in await sh(sandbox, LIVE), "no tmux server started"
    await sandbox.kill_processes()
    assert [line.split()[1] for line in (await sh(sandbox, LIVE)).splitlines()] == ["sh", "sleep"]
    size = await sh(sandbox, "wc -c < /app/tmux.log")
    await asyncio.sleep(0.5)
    assert await sh(sandbox, "wc -c < /app/tmux.log") == size, "the tmux pane still writes"
    r = await sandbox.exec("tmux ls")
    assert r.exit_code != 0, f"the tmux server survived: {r.stdout}"


@docker
async def test_kill_processes_with_docker_init_spares_the_keeper(base_image):
    provider = DockerProvider({"init": True})
    async with provider.create(new_spec()) as sb:
        assert (await sh(sb, "cat /proc/1/comm")).strip() == "docker-init"
        await _plant_writers(sb)
        await sb.kill_processes()
        live = [line.split()[1] for line in (await sh(sb, LIVE)).splitlines()]
        assert sorted(live) == ["docker-init", "sh", "sleep"], f"left alive: {live}"
        await _assert_writers_stopped(sb)
        await sb.kill_processes()  # a second call on a quiet sandbox is fine
        assert await sh(sb, "echo usable") == "usable\n"


@docker
async def test_kill_processes_leaves_no_zombies_and_is_fast(sandbox):
    # orphans exit and must be reaped by PID 1; a parent that never waits keeps zombies until it is killed
    await sh(sandbox, "exec </dev/null >/dev/null 2>&1; for i in $(seq 20); do (sleep 0.1 &); done; "
                      "setsid perl -e 'for (1..20) { exit 0 unless fork } sleep 600' &")  # fmt: skip
    await asyncio.sleep(0.5)
    states = await sh(sandbox, "for f in /proc/[0-9]*/stat; do read -r l < $f; set -- ${l##*) }; echo $1; done")
    assert states.split().count("Z") == 20, f"the test needs 20 zombies to clean: {states.split()}"
    times = []
    for _ in range(20):
        started = time.monotonic()
        await sandbox.kill_processes()
        times.append(time.monotonic() - started)
    await asyncio.sleep(0.2)
    states = await sh(sandbox, "for f in /proc/[0-9]*/stat; do read -r l < $f; set -- ${l##*) }; echo $1; done")
    assert "Z" not in states.split(), "zombies piled up"
    print(f"kill_processes: median {statistics.median(times) * 1000:.0f} ms over 20 calls, max {max(times) * 1000:.0f} ms")
    assert statistics.median(times) < 2.0


@docker
async def test_the_agent_cannot_end_its_own_sandbox(sandbox):
    """A dead container is an infra error, which is retried: an agent must not be able to cause one."""
    r = await sandbox.exec("for s in HUP INT QUIT TERM USR1 USR2 PIPE ALRM KILL STOP; do kill -s $s 1; done; echo sent")
    assert r.stdout == "sent\n"
    await asyncio.sleep(0.3)
    assert await sh(sandbox, "echo alive; cat /proc/1/comm") == "alive\nsh\n"


@docker
async def test_removing_the_working_directory_does_not_break_later_commands(sandbox):
    """Else the verifier's test.sh could not start and the trial would end as an error, not as a graded 0."""
    await sh(sandbox, "rm -rf /app")
    r = await sandbox.exec("pwd; echo graded")
    assert r.stdout == "/\ngraded\n", r
    assert any("working directory /app was removed" in note for note in sandbox.notes)
    r = await sandbox.exec("pwd", cwd="/app")  # a cwd the caller names explicitly is not replaced
    assert r.exit_code != 0


# -- limits --------------------------------------------------------------------------------------------------------


BOMB = "exec </dev/null >/dev/null 2>&1; bomb() { bomb | bomb & }; bomb"


def _pids(name: str) -> int:
    out = subprocess.run(["docker", "stats", "--no-stream", "--format", "{{.PIDs}}", name],
                         capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    return int(out.stdout.strip())


@docker
async def test_a_fork_bomb_stays_bounded_and_the_sandbox_recovers(base_image, containers):
    provider = DockerProvider({"pids_limit": 128})
    spec = new_spec()
    sb = provider.create(spec)
    await sb.start()
    try:
        await sb.exec(BOMB, timeout=30)
        peak = 0
        for _ in range(10):  # the engine counts the container's pids; nothing has to fork inside it for that
            await asyncio.sleep(0.5)
            peak = max(peak, _pids(sb.name))
        assert 64 < peak <= 128, f"the bomb should fill the limit and stop there; peak {peak} pids"
        await sb.kill_processes(timeout=30)
        assert await sh(sb, "echo usable") == "usable\n"
        assert _pids(sb.name) <= 3, f"{_pids(sb.name)} pids after kill_processes()"
        await sb.exec(BOMB, timeout=30)  # and once more, stopped without a kill
        await asyncio.sleep(1)
    finally:
        started = time.monotonic()
        await sb.stop()
    assert time.monotonic() - started < 5
    assert containers(f"tackroom._trial={spec.name}") == []


@docker
async def test_memory_beyond_memory_mb_cannot_be_allocated(provider):
    async with provider.create(new_spec(memory_mb=128)) as sb:
        small = await sb.exec("perl -e '$x = q(a) x (32*1024*1024); print length $x'")
        assert small.stdout == str(32 * 1024 * 1024), small.stderr
        big = await sb.exec("perl -e '$x = q(a) x (512*1024*1024); print length $x'")
        assert big.exit_code != 0 and big.stdout == "", f"512 MB allocated under a 128 MB limit: {big!r}"
        limits = await sh(sb, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes "
                              "2>/dev/null || cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory.swap.max")  # fmt: skip
        assert limits.split()[0] == str(128 * 1024 * 1024)
        assert limits.split()[1] in (str(128 * 1024 * 1024), "0"), "swap extends the memory limit"
        assert await sh(sb, "echo alive") == "alive\n", "the OOM killer took the sandbox with it"


@docker
async def test_no_network_but_loopback(sandbox):
    assert (await sh(sandbox, "ls /sys/class/net")).split() == ["lo"]
    r = await sandbox.exec("timeout 5 bash -c 'echo > /dev/tcp/1.1.1.1/53'")
    assert r.exit_code != 0


@docker
async def test_a_forwarded_host_port_is_the_only_way_out(sandbox):
    """An agent_in_sandbox harness's agent (root in a --network none container) gets its policy's port and
    nothing else: not another host port, not the forwarder's host side, and nothing after its turn."""

    async def serve(what: bytes):
        async def answer(reader, writer):
            writer.write(what)
            await writer.drain()
            writer.close()

        return await asyncio.start_server(answer, "127.0.0.1", 0)

    policy, engine = await serve(b"policy\n"), await serve(b"engine\n")
    try:
        url = await sandbox.forward_host_port(policy.sockets[0].getsockname()[1])
        inner = url.rsplit(":", 1)[1]

        async def dial(port) -> str:
            r = await sandbox.exec(f"timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && head -c 20 <&3'")
            return r.stdout.strip() if r.ok else "refused"

        assert await dial(inner) == "policy"
        assert await dial(engine.sockets[0].getsockname()[1]) == "refused"
        assert (await sh(sandbox, "ls /sys/class/net")).split() == ["lo"]
        # A hostile agent can neither re-bind the forwarded port nor kill what serves it (it is not in the container).
        r = await sandbox.exec(f"kill -9 -1; timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{inner} && head -c 20 <&3'")
        assert "policy" in r.stdout, r
        await sandbox.kill_processes()
        assert await dial(inner) == "refused", "the forward outlived the agent's turn"
    finally:
        policy.close()
        engine.close()


@docker
async def test_no_new_privileges_and_dropped_capabilities(sandbox):
    assert (await sh(sandbox, "grep NoNewPrivs /proc/self/status")).split() == ["NoNewPrivs:", "1"]
    # a setuid-root binary run by nobody stays nobody
    await sh(sandbox, "cp /usr/bin/id /tmp/id-suid && chmod 4755 /tmp/id-suid")
    euid = await sh(sandbox, "setpriv --reuid=65534 --regid=65534 --clear-groups /tmp/id-suid -u")
    assert euid.strip() == "65534", "a setuid binary raised privileges"
    r = await sandbox.exec("mknod /tmp/mem c 1 1")
    assert r.exit_code != 0 and "not permitted" in r.stderr, "MKNOD must be dropped"
    bounding = int((await sh(sandbox, "grep CapBnd /proc/self/status")).split()[1], 16)
    assert not bounding & (1 << 13), "NET_RAW must be dropped"
    assert bounding & (1 << 5), "KILL is still needed (kill_processes, the agent's own job control)"


@docker
async def test_kill_processes_raises_when_the_sandbox_is_gone(provider):
    sb = provider.create(new_spec())
    await sb.start()
    await sb.stop()
    with pytest.raises(SandboxError):
        await sb.kill_processes()


# -- the host-side extractor, fed archives docker would never send --------------------------------------------------


def _tar(*entries: tuple[str, str, str | bytes]) -> tarfile.TarFile:
    """Entries: (name, kind, data or link target); kinds: file, dir, sym, hard, fifo, chr."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, data in entries:
            info = tarfile.TarInfo(name)
            if kind == "file":
                raw = data.encode() if isinstance(data, str) else data
                info.size = len(raw)
                tar.addfile(info, io.BytesIO(raw))
                continue
            info.type = {"dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE,
                         "fifo": tarfile.FIFOTYPE, "chr": tarfile.CHRTYPE}[kind]  # fmt: skip
            if kind in ("sym", "hard"):
                info.linkname = str(data)
            tar.addfile(info)
    buf.seek(0)
    return tarfile.open(fileobj=buf)


@pytest.mark.parametrize("name", ["/etc/evil", "top/../../evil", "top/a/../../../evil"])
def test_absolute_and_dotdot_member_names_are_refused_before_anything_is_written(tmp_path, name):
    dest = tmp_path / "dest"
    with pytest.raises(SandboxPathError):
        extract_tar(_tar(("top", "dir", ""), ("top/ok.txt", "file", "ok"), (name, "file", "evil")), dest, top="top")
    assert not dest.exists() or list(dest.iterdir()) == []
    assert not (tmp_path / "evil").exists()


def test_a_link_then_a_write_through_it_lands_inside(tmp_path, host_canary):
    dest = tmp_path / "dest"
    skipped = extract_tar(_tar(
        ("top", "dir", ""),
        ("top/abs", "sym", str(host_canary.parent)),          # absolute: left out
        ("top/abs/host-secret.txt", "file", "through abs"),  # lands in a real directory dest/abs
        ("top/up", "sym", "../../canary"),                    # '..': left out
        ("top/up/host-secret.txt", "file", "through up"),
        ("top/here", "sym", "."),                             # kept: resolves to its own directory
        ("top/b", "sym", "here"),
        ("top/a", "sym", "b/.."),                              # '..': left out (b -> here -> . would make it dest/..)
    ), dest, top="top")  # fmt: skip
    assert sorted(skipped) == ["top/a", "top/abs", "top/up"]
    assert (dest / "abs").is_dir() and not (dest / "abs").is_symlink()
    assert (dest / "abs" / "host-secret.txt").read_text() == "through abs"
    assert (dest / "up" / "host-secret.txt").read_text() == "through up"
    for p in dest.rglob("*"):
        assert Path(p).resolve().is_relative_to(dest.resolve()), p
    _host_untouched(host_canary)


def test_hard_links_are_copies_of_members_and_never_of_host_files(tmp_path, host_canary):
    dest = tmp_path / "dest"
    skipped = extract_tar(_tar(
        ("top", "dir", ""),
        ("top/f", "file", "member"),
        ("top/copy", "hard", "top/f"),
        ("top/host", "hard", str(host_canary)),
        ("top/host2", "hard", "top/../canary/host-secret.txt"),
        ("top/missing", "hard", "top/nope"),
    ), dest, top="top")  # fmt: skip
    assert sorted(skipped) == ["top/host", "top/host2", "top/missing"]
    assert (dest / "copy").read_text() == "member" and (dest / "copy").stat().st_ino != (dest / "f").stat().st_ino
    assert host_canary.stat().st_nlink == 1
    _host_untouched(host_canary)


def test_devices_fifos_and_setuid_bits_do_not_reach_the_host(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("top/suid")
        info.mode, info.size = 0o6777, 1
        tar.addfile(info, io.BytesIO(b"x"))
    buf.seek(0)
    dest = tmp_path / "dest"
    extract_tar(tarfile.open(fileobj=buf), dest, top="top")
    assert oct((dest / "suid").stat().st_mode & 0o7777) == oct(0o755)
    skipped = extract_tar(_tar(("top", "dir", ""), ("top/p", "fifo", ""), ("top/mem", "chr", "")), dest, top="top")
    assert sorted(skipped) == ["top/mem", "top/p"] and not (dest / "p").exists() and not (dest / "mem").exists()
    with pytest.raises(SandboxPathError, match="FIFO"):
        extract_tar(_tar(("top", "fifo", "")), tmp_path / "single", top="top")
    with pytest.raises(SandboxPathError, match="link"):
        extract_tar(_tar(("top", "sym", "/etc/passwd")), tmp_path / "single", top="top")
    assert not (tmp_path / "single").exists()


def test_members_outside_the_downloaded_entry_are_refused(tmp_path):
    with pytest.raises(SandboxPathError, match="outside"):
        extract_tar(_tar(("top", "dir", ""), ("other/x", "file", "x")), tmp_path / "dest", top="top")


@docker
async def test_a_sparse_file_cannot_fill_the_host_through_a_download(provider, tmp_path):
    from tackroom import SandboxExhaustedError

    async with provider.create(new_spec(storage_mb=64)) as sb:
        await sh(sb, "mkdir -p /app/out && truncate -s 200G /app/out/huge && echo ok > /app/out/small")
        with pytest.raises(SandboxExhaustedError, match="holes"):
            await sb.download("/app/out", tmp_path / "out", timeout=60)
        assert not (tmp_path / "out" / "huge").exists()
        await sh(sb, "rm /app/out/huge")
        await sb.download("/app/out", tmp_path / "out2", timeout=60)
        assert (tmp_path / "out2" / "small").read_text() == "ok\n"
