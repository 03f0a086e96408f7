"""Attacks on grading in the ``local`` sandbox: the reward channel, services kept into grading, the grader's
interpreters, the grading phase's network and exhaustion. Every test plays the agent inside a real bubblewrap
sandbox (or a real trial whose "solution" is the attack) and then reads what grading saw."""

from __future__ import annotations

import asyncio
import os
import textwrap
from pathlib import Path

import pytest

import tackroom
import tackroom_app
from tackroom import Trial
from tackroom_app import TrialPlugins, TrialRuntime
from tackroom_local import LocalSandbox, LocalSandboxProvider, services


@pytest.fixture
async def make(tmp_path):
    """Start local sandboxes whose roots live in the test's folder; all are stopped afterwards."""
    made: list[LocalSandbox] = []

    async def make(spec: dict | None = None, **options) -> LocalSandbox:
        provider = LocalSandboxProvider({"root_dir": str(tmp_path / "roots"), **options})
        sb = provider.create(tackroom.SandboxSpec(name="grading", **(spec or {})))
        made.append(sb)
        await sb.start()
        return sb

    yield make
    for sb in made:
        await sb.stop()


async def run_task(tmp_path: Path, solve: str, test_sh: str, toml: str = "") -> tackroom.TrialResult:
    """One real trial of a task whose oracle solution is ``solve`` and whose grader is ``test_sh``."""
    task_dir = tmp_path / "task"
    for sub in ("tests", "solution"):
        (task_dir / sub).mkdir(parents=True)
    (task_dir / "instruction.md").write_text("make /app/answer.txt say 42")
    (task_dir / "task.toml").write_text("[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 30\n" + toml)
    (task_dir / "tests" / "test.sh").write_text(textwrap.dedent(test_sh))
    (task_dir / "solution" / "solve.sh").write_text(textwrap.dedent(solve))
    task = tackroom.load_task(task_dir)
    manager = tackroom_app.PluginManager()
    oracle, verifier = manager.get("harness", "oracle"), manager.get("verifier", "test-script")
    trial = Trial(task_id=task.id, task_path=str(task.path), harness="oracle", sandbox="local", verifier="test-script")
    plugins = TrialPlugins(oracle, oracle.Options(), LocalSandboxProvider({"root_dir": str(tmp_path / "roots")}),
                           verifier, verifier.Options())  # fmt: skip
    rt = TrialRuntime(tmp_path / "run", progress=False, manager=manager, retry_backoff_sec=0.01)
    return await rt.run_trial(trial, task, plugins)


# -- the reward channel ---------------------------------------------------------------------


async def test_a_prefilled_and_locked_reward_folder_is_never_read_as_the_reward(tmp_path):
    # The agent writes reward 1 and makes its folder unlistable and unwritable for a root without capabilities:
    # `rm -rf` cannot empty it, `ls -A` sees nothing in it, and test.sh cannot write its own reward there.
    solve = """\
        echo wrong > /app/answer.txt
        mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt
        chmod 444 /logs/verifier/reward.txt && chmod 111 /logs/verifier /logs
        """
    test_sh = """\
        if grep -qx 42 /app/answer.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
        """
    result = await run_task(tmp_path, solve, test_sh)
    assert result.reward == 0.0 and (result.error is None or result.error.error_class == "model"), result


LOCK_REWARD = """\
    mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt
    chmod 444 /logs/verifier/reward.txt && chmod 111 /logs/verifier /logs
    """
"""The agent writes reward 1 and makes its folder unlistable and unwritable for a root without capabilities."""

WRITE_ZERO = ["bash", "-c", "echo 0 > /logs/verifier/reward.txt"]


async def grade(sb, tmp_path: Path, cmd=WRITE_ZERO, **kw):
    dest = tmp_path / f"reward-{len(list(tmp_path.glob('reward-*')))}"
    result = await sb.run_grader(cmd, private=["/tests", "/logs/verifier"], collect="/logs/verifier", dest=dest, **kw)
    return result, dest


async def test_the_grader_writes_into_a_private_reward_folder_whatever_the_agent_left_there(make, tmp_path):
    sb = await make()
    await sb.exec(LOCK_REWARD)
    await sb.kill_processes()
    result, dest = await grade(sb, tmp_path)
    assert result.exit_code == 0, result
    assert (dest / "reward.txt").read_text() == "0\n", "the agent's locked reward file was read as the reward"
    # the sandbox's own folder is as the agent left it: grading never wrote there, and never read it
    assert (sb.root / "logs" / "verifier" / "reward.txt").read_text() == "1\n"


async def test_the_reward_folder_comes_out_as_regular_files_and_folders_only(make, tmp_path):
    sb = await make()
    await sb.kill_processes()
    script = ("cd /logs/verifier && ln -s /etc/passwd reward.txt && ln -s sub/x.json inside.json && mkfifo pipe && "
              "mkdir sub && echo '{}' > sub/x.json && truncate -s 1G sparse")
    result, dest = await grade(sb, tmp_path, cmd=["bash", "-c", script])
    assert result.ok, result
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*")) == ["sparse", "sub", "sub/x.json"]
    assert (dest / "sparse").stat().st_blocks == 0


# -- services kept into grading ---------------------------------------------------------------

SERVICE = r'''
import glob, os, socket, time
tcp = socket.socket(); tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
tcp.bind(("0.0.0.0", 8080)); tcp.listen(); tcp.setblocking(False)
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind(("127.0.0.1", 5353))
unix = socket.socket(socket.AF_UNIX); unix.bind("/tmp/service.sock"); unix.listen()
if os.fork() == 0:  # a worker that shares the listening socket, as nginx's do
    unix.close()
    while True: time.sleep(1)
while True:
    try:
        conn, _ = tcp.accept(); conn.sendall(b"hello from the service\n"); conn.close()
    except BlockingIOError:
        pass
    with open("/app/ticks", "a") as f: f.write("t\n")
    # every way a process of the same uid might reach the grader's folders: its own view, then each process's
    targets = ["/logs/verifier/reward.txt", "/tests/test.sh"]
    for proc in glob.glob("/proc/[0-9]*"):
        targets += [f"{proc}/root/logs/verifier/reward.txt", f"{proc}/root/tests/test.sh", f"{proc}/cwd/../logs/verifier/reward.txt"]
    for t in targets:
        try:
            with open(t, "w") as f: f.write("1\n")
            with open("/app/wrote", "a") as f: f.write(t + "\n")
        except OSError:
            pass
    time.sleep(0.005)
'''


def proc_state(pid: int) -> str:
    raw = Path(f"/proc/{pid}/stat").read_bytes()
    return raw[raw.rfind(b")") + 2 :][:1].decode()


async def test_unprivileged_the_sandbox_keeps_no_services_and_says_why(make):
    sb = await make()
    sb.namespaces.uid = None  # what an unprivileged tackroom has: the sandbox's root is the invoking user
    with pytest.raises(NotImplementedError, match="only when tackroom runs as root.*/proc/PID/root"):
        await sb.kill_processes(keep_listening=True)


async def test_a_kept_service_runs_only_while_grading_and_cannot_reach_the_graders_folders(make, tmp_path):
    sb = await make()
    (sb.root / "app" / "service.py").write_text(SERVICE)
    r = await sb.exec("nohup python3 /app/service.py >/dev/null 2>&1 & "
                      "(while :; do echo x >> /app/plain-writer; sleep 0.01; done) >/dev/null 2>&1 & "
                      "for i in $(seq 100); do [ -s /app/ticks ] && [ -S /tmp/service.sock ] && break; sleep 0.05; done")
    assert r.ok, r
    kept = await sb.kill_processes(keep_listening=True)
    assert len(kept) == 2, kept  # the service and its worker; the plain writer is gone
    assert any("python3: tcp 0.0.0.0:8080" in line and "udp 127.0.0.1:5353" in line and "unix /tmp/service.sock" in line
               for line in kept), kept
    assert all(proc_state(pid) == "T" for pid in sb.namespaces.kept), "the kept service must be frozen"
    ticks = (sb.root / "app" / "ticks").read_text()
    writer = (sb.root / "app" / "plain-writer").read_text()
    await asyncio.sleep(0.3)
    assert (sb.root / "app" / "ticks").read_text() == ticks, "a frozen service ran"
    assert (sb.root / "app" / "plain-writer").read_text() == writer, "the plain background writer survived"
    (sb.root / "app" / "wrote").unlink(missing_ok=True)
    (tmp_path / "tests").mkdir()  # as the verifier does: fresh tests once the agent's turn is over
    (tmp_path / "tests" / "test.sh").write_text("the task's tests\n")
    await sb.upload_pristine(tmp_path / "tests", "/tests")
    grader = ("exec 3<>/dev/tcp/127.0.0.1/8080 && head -n1 <&3; sleep 1; cat /tests/test.sh; "
              "echo 0 > /logs/verifier/reward.txt; sleep 0.5")
    result, dest = await grade(sb, tmp_path, cmd=["bash", "-c", grader])
    assert result.stdout == "hello from the service\nthe task's tests\n", result
    assert (dest / "reward.txt").read_text() == "0\n"
    grading_ticks = (sb.root / "app" / "ticks").read_text()
    assert len(grading_ticks) > len(ticks) + 20, "the service did not run while the grader ran"
    wrote = (sb.root / "app" / "wrote").read_text().split()
    assert "/logs/verifier/reward.txt" in wrote, "the service wrote only where the grader never looks"
    assert all(proc_state(pid) == "T" for pid in sb.namespaces.kept), "the service must be frozen again after grading"
    await asyncio.sleep(0.3)
    assert (sb.root / "app" / "ticks").read_text() == grading_ticks
    # The attack is real: with the service running and no private view (core's default run_grader), the
    # reward read is the service's.
    shared = tmp_path / "shared"
    services.resume(sb.namespaces.kept)
    await tackroom.Sandbox.run_grader(sb, ["bash", "-c", "sleep 0.5; echo 0 > /logs/verifier/reward.txt; sleep 0.5"],
                                      private=["/tests", "/logs/verifier"], collect="/logs/verifier", dest=shared)
    assert (shared / "reward.txt").read_text() in ("1\n", ""), "the service's write (or its truncation) was read"
    assert not [p for p in sb.namespaces.kept if Path(f"/proc/{p}").exists()]


# -- the grader's interpreters start clean -------------------------------------------------------

HOOKS = r"""
set -e
py=$(python3 -c 'import sys; print(f"python{sys.version_info[0]}.{sys.version_info[1]}")')
for home in /root /tmp/home; do
    site=$home/.local/lib/$py/site-packages
    mkdir -p $site $home/perl5
    echo 'import os; open("/app/ran-pth", "w").write("pth")' > $site/evil.pth
    echo 'open("/app/ran-usercustomize", "w").write("user")' > $site/usercustomize.py
    echo 'open("/app/ran-sitecustomize", "w").write("site")' > $site/sitecustomize.py
    echo 'export PYTHONPATH=/app/hooks PERL5LIB=/app/perl5 PERL5OPT=-MEvil; touch /app/ran-bashrc' > $home/.bashrc
    cp $home/.bashrc $home/.bash_profile; cp $home/.bashrc $home/.profile
done
mkdir -p /app/hooks /app/perl5
echo 'open("/app/ran-pythonpath", "w").write("pythonpath")' > /app/hooks/sitecustomize.py
echo 'open(my $f, ">", "/app/ran-perl5lib"); 1;' > /app/perl5/Evil.pm
echo 'package strict; open(my $f, ">", "/app/ran-perl5lib-strict"); sub import {} 1;' > /app/perl5/strict.pm
echo 'touch /app/ran-bash-env' > /app/bash-env.sh
"""
"""Start-up hooks a hostile agent leaves for the grader's python, perl and bash, in every place they look."""

INTERPRETERS = ("python3 -c 'print(1)'; python3 -m site >/dev/null; perl -le 'use strict; print 2'; "
                "bash -c 'echo 3'; bash -lc 'echo 4'; sh -c 'echo 5'")


async def test_the_graders_python_perl_and_bash_load_no_start_up_hook_the_agent_left(make, tmp_path):
    # The sandbox's own env (a task's ENV lines) points the interpreters at folders the agent controls.
    sb = await make({"env": {"PYTHONPATH": "/app/hooks", "PERL5LIB": "/app/perl5", "PERL5OPT": "-MEvil",
                             "BASH_ENV": "/app/bash-env.sh", "ENV": "/app/bash-env.sh", "HOME": "/tmp/home",
                             "PYTHONUSERBASE": "/tmp/home/.local"}})
    assert (await sb.exec(HOOKS)).ok
    # the hooks are live: a plain exec runs every one of them
    assert (await sb.exec(INTERPRETERS)).ok
    assert sorted(p.name for p in (sb.root / "app").glob("ran-*")) == [
        "ran-bash-env", "ran-bashrc", "ran-perl5lib", "ran-perl5lib-strict", "ran-pth", "ran-pythonpath",
        "ran-usercustomize"]
    for p in (sb.root / "app").glob("ran-*"):
        p.unlink()
    await sb.kill_processes()
    result, _ = await grade(sb, tmp_path, cmd=["bash", "-c", INTERPRETERS + "; echo 0 > /logs/verifier/reward.txt"])
    assert result.stdout.split() == ["1", "2", "3", "4", "5"], result
    assert not list((sb.root / "app").glob("ran-*")), "a start-up hook ran inside grading"
    # the grader's own env is the one way in
    result, _ = await grade(sb, tmp_path, cmd=["python3", "-c", "import os; print(os.environ['PYTHONPATH'])"],
                            env={"PYTHONPATH": "/tests/lib"})
    assert result.stdout == "/tests/lib\n", result


# -- the grading phase's network ------------------------------------------------------------------


@pytest.fixture
async def host_port():
    """A TCP server on the host's loopback: reachable only from a sandbox that shares the host's network."""
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


def reach(port: int) -> str:
    return f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo reached || echo offline"


async def test_set_network_switches_an_offline_agent_phase_to_public_grading_and_back(make, tmp_path, host_port):
    sb = await make()
    assert (await sb.exec(reach(host_port))).stdout == "offline\n"
    await sb.kill_processes()
    await sb.set_network(tackroom.NetworkPolicy(mode="public"))
    result, _ = await grade(sb, tmp_path, cmd=["bash", "-c", reach(host_port)])
    assert result.stdout == "reached\n", result
    await sb.set_network(tackroom.NetworkPolicy(mode="none"))
    result, _ = await grade(sb, tmp_path, cmd=["bash", "-c", reach(host_port)])
    assert result.stdout == "offline\n", result


async def test_with_services_kept_only_the_graders_command_gets_the_grading_network(make, tmp_path, host_port):
    sb = await make()
    await sb.exec("nohup python3 -c 'import socket, time; s = socket.socket(); s.bind((\"127.0.0.1\", 8080)); "
                  "s.listen(); time.sleep(1000)' >/dev/null 2>&1 & sleep 0.5")
    assert len(await sb.kill_processes(keep_listening=True)) == 1
    await sb.set_network(tackroom.NetworkPolicy(mode="public"))
    result, _ = await grade(sb, tmp_path, cmd=["bash", "-c", reach(host_port)])
    assert result.stdout == "reached\n", result
    assert any("grading ran with the host network" in n for n in sb.notes), sb.notes
    assert (await sb.exec(reach(host_port))).stdout == "offline\n", "the sandbox itself must stay offline"


async def test_with_services_kept_a_public_agent_phase_grades_offline_with_only_loopback(make, tmp_path, host_port):
    sb = await make({"network": tackroom.NetworkPolicy(mode="public")})
    await sb.exec("nohup python3 -c 'import socket, time; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); "
                  "s.listen(); time.sleep(1000)' >/dev/null 2>&1 & sleep 0.5")
    assert len(await sb.kill_processes(keep_listening=True)) == 1
    await sb.set_network(tackroom.NetworkPolicy(mode="none"))
    script = (f"{reach(host_port)}; ls /sys/class/net 2>/dev/null; tail -n +3 /proc/net/dev | cut -d: -f1; "
              "python3 -c 'import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen(); "
              "socket.create_connection(s.getsockname()); print(\"loopback\")'")
    result, _ = await grade(sb, tmp_path, cmd=["bash", "-c", script])
    assert result.stdout.split() == ["offline", "lo", "loopback"], result


# -- exhaustion in the agent's turn ---------------------------------------------------------------

FORK_BOMB = "b() { b | b & }; (b) >/dev/null 2>&1 & sleep 2"


async def test_a_fork_bomb_is_killed_by_kill_processes_keep_listening_and_grading_runs(make, tmp_path):
    sb = await make(pids_limit=64)
    await sb.exec(FORK_BOMB, timeout=30)
    assert await sb.kill_processes(keep_listening=True) == []
    result, dest = await grade(sb, tmp_path)
    assert result.ok and (dest / "reward.txt").read_text() == "0\n", result


async def test_a_listening_fork_bomb_that_holds_every_pid_is_the_models_zero(make, tmp_path):
    sb = await make(pids_limit=64)
    bomb = ("nohup python3 -c 'import os, socket, time\ns = socket.socket(); s.bind((\"127.0.0.1\", 8080)); s.listen()\n"
            "while True:\n    try: os.fork()\n    except OSError: time.sleep(0.01)' >/dev/null 2>&1 & sleep 2")
    await sb.exec(bomb, timeout=30)
    kept = await sb.kill_processes(keep_listening=True)
    assert len(kept) > 50, kept  # every child holds the listening socket
    with pytest.raises(tackroom.SandboxExhaustedError, match="hold every pid"):
        await grade(sb, tmp_path)
    await sb.kill_processes()
    result, _ = await grade(sb, tmp_path)
    assert result.ok, "the sandbox must stay usable once they are killed"


FILL_DISK = """
import os
os.makedirs("/app/filled", exist_ok=True)
for size in (1 << 20, 4096, 1):
    try:
        while True:
            with open(f"/app/filled/{os.urandom(6).hex()}", "wb") as f:
                for _ in range(64):
                    f.write(b"x" * size); f.flush(); os.fsync(f.fileno())
    except OSError:
        pass
"""


async def test_a_full_disk_is_the_models_zero_and_the_reward_still_reaches_the_grader(make, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("storage_mb needs root (a loop-mounted filesystem)")
    sb = await make({"storage_mb": 16})
    fill = "python3 /app/fill.py"  # every block, then every inode
    (sb.root / "app" / "fill.py").write_text(FILL_DISK)
    await sb.exec(fill, timeout=60)
    await sb.kill_processes()
    with pytest.raises(tackroom.SandboxExhaustedError, match="/logs/verifier is missing and cannot be created.*filled"):
        await grade(sb, tmp_path)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test.sh").write_text("x" * 100_000)
    with pytest.raises(tackroom.SandboxExhaustedError, match="filled the sandbox's disk"):
        await sb.upload(tmp_path / "tests", "/tests/more")
    # once its folders exist (the verifier makes them), grading needs no disk: the private copies are tmpfs
    await sb.exec(f"rm -r /app/filled; mkdir -p /tests /logs/verifier; {fill}", timeout=60)
    assert "No space left" in (await sb.exec("echo x > /app/more")).stderr
    result, dest = await grade(sb, tmp_path)
    assert result.ok and (dest / "reward.txt").read_text() == "0\n", result


async def test_a_huge_sparse_file_keeps_its_holes_on_download_and_upload(make, tmp_path):
    sb = await make()
    assert (await sb.exec("truncate -s 2G /app/big && echo tail >> /app/big && printf head | "
                          "dd of=/app/big conv=notrunc 2>/dev/null")).ok
    await sb.kill_processes()
    await sb.download("/app", tmp_path / "app")
    big = tmp_path / "app" / "big"
    assert big.stat().st_size == 2 * 1024**3 + 5
    assert big.stat().st_blocks * 512 < 1024**2, "the download wrote the holes out"
    with open(big, "rb") as f:
        assert f.read(4) == b"head" and (f.seek(-5, 2), f.read())[1] == b"tail\n"
    await sb.upload(big, "/tmp/big-again")
    again = (sb.root / "tmp" / "big-again").stat()
    assert again.st_size == big.stat().st_size and again.st_blocks * 512 < 1024**2, "the upload wrote the holes out"


# -- real trials: a Harbor-style task whose solution starts a server -------------------------------

SERVE = """\
    echo 42 > /app/answer.txt
    nohup python3 -m http.server 8000 --bind 127.0.0.1 --directory /app >/dev/null 2>&1 &
    for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/8000) 2>/dev/null && break; sleep 0.05; done
    """
ASK_SERVER = """\
    got=$(python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:8000/answer.txt").read().decode().strip())')
    if [ "$got" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
    """


async def test_a_server_the_solution_started_answers_the_tests_as_under_harbor(tmp_path):
    result = await run_task(tmp_path, SERVE, ASK_SERVER)
    assert result.error is None and result.reward == 1.0, result
    assert any("http.server" in n or "python3: tcp 127.0.0.1:8000" in n for n in result.notes), result.notes


async def test_a_server_on_port_80_binds_in_the_sandboxs_own_network_only(make, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("run as root only: the sandbox's network namespace is the host user namespace's to configure")
    host_start = Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text()
    sb = await make()
    await sb.exec("echo 42 > /app/answer.txt; nohup python3 -m http.server 80 --bind 127.0.0.1 --directory /app "
                  ">/dev/null 2>&1 & sleep 0.5")
    kept = await sb.kill_processes(keep_listening=True)
    assert any("tcp 127.0.0.1:80" in line for line in kept), kept
    result, _ = await grade(sb, tmp_path, cmd=["python3", "-c", "import urllib.request; "
                                               "print(urllib.request.urlopen('http://127.0.0.1/answer.txt').read())"])
    assert result.stdout == "b'42\\n'\n", result
    assert Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text() == host_start


async def test_a_hostile_server_kept_into_grading_cannot_write_the_reward(tmp_path):
    solve = """\
        echo wrong > /app/answer.txt
        cat > /app/service.py <<'PY'
        """ + textwrap.indent(SERVICE, "        ") + """
        PY
        nohup python3 /app/service.py >/dev/null 2>&1 &
        sleep 0.5
        """
    test_sh = """\
        if grep -qx 42 /app/answer.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
        sleep 1
        """
    result = await run_task(tmp_path, solve, test_sh)
    assert result.error is None and result.reward == 0.0, result
    assert any("python3: tcp 0.0.0.0:8080" in n for n in result.notes), f"the service was not kept: {result.notes}"


# -- run_grader's failure modes ---------------------------------------------------------------------


async def test_a_grader_past_its_timeout_is_killed_and_kept_services_frozen_again(make, tmp_path):
    sb = await make()
    await sb.exec("nohup python3 -c 'import socket, time; s = socket.socket(); s.bind((\"127.0.0.1\", 8080)); "
                  "s.listen(); time.sleep(1000)' >/dev/null 2>&1 & sleep 0.5")
    assert len(await sb.kill_processes(keep_listening=True)) == 1
    with pytest.raises(tackroom.SandboxTimeoutError, match="timed out after 1"):
        await grade(sb, tmp_path, cmd=["bash", "-c", "sleep 1000 & sleep 1000"], timeout=1)
    assert all(proc_state(pid) == "T" for pid in sb.namespaces.kept)
    assert set(services.namespace_pids(sb.namespaces.pidns, skip={sb.namespaces.keeper_pid})) == sb.namespaces.kept, "the grader's processes survived"
    result, dest = await grade(sb, tmp_path)  # the sandbox stays usable
    assert result.ok and (dest / "reward.txt").read_text() == "0\n"


async def test_a_graders_background_leftovers_are_frozen_when_it_ends(make, tmp_path):
    sb = await make()
    await sb.kill_processes()
    result, _ = await grade(sb, tmp_path, cmd=["bash", "-c", "(while :; do echo x >> /app/late; sleep 0.01; done) "
                                                                ">/dev/null 2>&1 & sleep 0.2; echo 0 > /logs/verifier/reward.txt"])
    assert result.ok
    size = (sb.root / "app" / "late").stat().st_size
    await asyncio.sleep(0.3)
    assert (sb.root / "app" / "late").stat().st_size == size, "the grader's background writer kept running"


async def test_a_private_folder_the_agent_made_a_link_is_the_models_zero(make, tmp_path):
    sb = await make()
    await sb.exec("mkdir -p /tmp/elsewhere /logs && rm -rf /logs/verifier && ln -s /tmp/elsewhere /logs/verifier")
    await sb.kill_processes()
    with pytest.raises(tackroom.GradingSabotagedError, match="/logs/verifier is not a plain folder"):
        await grade(sb, tmp_path)
    with pytest.raises(ValueError, match="collect='/app' must be one of"):
        await sb.run_grader(["true"], private=["/tests"], collect="/app", dest=tmp_path / "x")
