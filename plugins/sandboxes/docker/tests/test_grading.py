"""Grading on the docker sandbox: services the agent left listening stay (frozen) into grading, the grader's
command runs in a private view they cannot steer, the root helpers use tackroom's own toolset, and the
grading phase's network can differ from the agent's. Each attack test plays the agent."""

from __future__ import annotations

import asyncio
import socket
import threading
import uuid
from pathlib import Path

import pytest

from tackroom import GradingSabotagedError, NetworkPolicy, SandboxSpec
from tackroom_docker import DockerProvider
from tackroom_docker.grading import pids_exhausted
from tackroom_docker.sandbox import DockerSandbox

docker = pytest.mark.docker

# A service as an agent's solution would start one: perl (in every Debian image) answering on a TCP port.
SERVICE = ("setsid perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalPort => 8080, Listen => 5, ReuseAddr => 1) "
           "or die; while ($c = $s->accept) { print $c qq(served\\n); close $c }' >/dev/null 2>&1 < /dev/null &")
# test.sh reads the service with bash's /dev/tcp (no curl in the slim image).
READ_SERVICE = "exec 3<>/dev/tcp/127.0.0.1/8080 && cat <&3"


def new_spec(**kw) -> SandboxSpec:
    return SandboxSpec(name=f"grading-{uuid.uuid4().hex[:8]}", **kw)


@pytest.fixture
async def sandbox(provider):
    sb = provider.create(new_spec())
    await sb.start()
    try:
        yield sb
    finally:
        await sb.stop()


async def sh(sb: DockerSandbox, cmd: str, timeout: float = 60) -> str:
    r = await sb.exec(cmd, timeout=timeout)
    assert r.ok, f"{cmd!r} exited {r.exit_code}: {r.stderr}"
    return r.stdout


async def states(sb: DockerSandbox) -> dict[str, str]:
    """comm -> state letter of every process but PID 1, read through the toolset."""
    out = await sb.container.root_exec('for d in /proc/[0-9]*; do [ "${d#/proc/}" = "$$" ] && continue; '
                              'read -r l < "$d/stat" 2>/dev/null || continue; c=${l#*(}; c=${c%)*}; set -- ${l##*) }; '
                              'echo "${d#/proc/} $c $1"; done', timeout=30)
    return {line.split()[1]: line.split()[2] for line in out.out.splitlines() if line.split()[0] != "1"}


async def grade(sb: DockerSandbox, script: str, tmp_path: Path, **kw) -> tuple[int, dict[str, str]]:
    """The test-script verifier's steps: fresh /tests and /logs/verifier, test.sh uploaded, run_grader."""
    await sb.fresh_folder("/tests")
    await sb.fresh_folder("/logs/verifier")
    await sb.write_file("/tests/test.sh", script)
    dest = tmp_path / f"collected-{uuid.uuid4().hex[:6]}"
    result = await sb.run_grader(["bash", "/tests/test.sh"], private=["/tests", "/logs/verifier"],
                                 collect="/logs/verifier", dest=dest, timeout=60, **kw)
    files = {p.name: p.read_text() for p in dest.iterdir() if p.is_file()} if dest.exists() else {}
    files["(output)"] = result.stdout + result.stderr
    return result.exit_code, files


@docker
async def test_a_listening_service_is_kept_frozen_and_answers_the_grader(sandbox, tmp_path):
    await sh(sandbox, f"{SERVICE} (sleep 1000 &); (setsid sleep 999 &); sleep 1")
    kept = await sandbox.kill_processes(keep_listening=True)
    assert len(kept) == 1 and kept[0].startswith("pid ") and "perl: tcp 0.0.0.0:8080" in kept[0], kept
    before = await states(sandbox)
    assert before.get("perl") == "T", f"the service is not frozen: {before}"
    assert not any(state != "Z" for comm, state in before.items() if comm == "sleep" and state == "T"), before
    code, files = await grade(sandbox, f"{READ_SERVICE} > /logs/verifier/got; echo 1 > /logs/verifier/reward.txt", tmp_path)
    assert code == 0 and files.get("got") == "served\n", files
    assert (await states(sandbox)).get("perl") == "T", "the service runs again after the grader's command"
    assert await sandbox.kill_processes() == []
    assert "perl" not in await states(sandbox)


@docker
async def test_a_kept_service_cannot_write_the_reward_or_the_tests_while_grading_runs(sandbox, tmp_path):
    # A listening service that, once resumed, rewrites the reward and the tests as fast as it can.
    await sh(sandbox, "mkdir -p /logs/verifier /tests; setsid perl -MIO::Socket::INET -e '"
             "$s = IO::Socket::INET->new(LocalPort => 9000, Listen => 5) or die; "
             "while (1) { for ([q(/logs/verifier/reward.txt), qq(1\\n)], [q(/tests/marker), qq(agent\\n)], "
             "[q(/tests/test.sh), qq(echo 1 > /logs/verifier/reward.txt\\n)], [q(/var/tmp/ran), qq(yes\\n)]) { "
             "if (open(my $f, q(>), $_->[0])) { print $f $_->[1] } } select undef, undef, undef, 0.005 }' "
             ">/dev/null 2>&1 < /dev/null & sleep 1")
    assert any("perl: tcp" in k for k in await sandbox.kill_processes(keep_listening=True))
    await sh(sandbox, "rm -f /var/tmp/ran")
    await sandbox.fresh_folder("/tests")
    await sandbox.fresh_folder("/logs/verifier")
    await sandbox.write_file("/tests/marker", "task\n")
    await sandbox.write_file("/tests/test.sh", "sleep 1; cat /tests/marker > /logs/verifier/seen; "
                                               "echo 0 > /logs/verifier/reward.txt; sleep 0.5\n")
    dest = tmp_path / "collected"
    result = await sandbox.run_grader(["bash", "/tests/test.sh"], private=["/tests", "/logs/verifier"],
                                      collect="/logs/verifier", dest=dest, timeout=60)
    assert result.exit_code == 0, result.stderr
    assert (dest / "reward.txt").read_text() == "0\n"
    assert (dest / "seen").read_text() == "task\n", "the service changed the tests the grader ran"
    # (frozen again at any point of its loop: a file it was rewriting may be empty)
    assert (await sandbox.exec("test -e /var/tmp/ran")).ok, "the service did not run during grading"
    assert (await sandbox.exec("test -e /logs/verifier/reward.txt")).ok, "(its writes went to the container's own folder)"


@docker
async def test_a_kept_service_cannot_rewrite_a_grader_tool_while_grading_runs(sandbox, tmp_path):
    original = await sh(sandbox, "sha256sum /usr/bin/grep")
    await sh(sandbox, "printf '#!/bin/sh\\nexit 0\\n' > /var/tmp/fake; setsid perl -MIO::Socket::INET -e '"
             "$s = IO::Socket::INET->new(LocalPort => 9001, Listen => 5) or die; "
             "while (1) { system(q(cp /var/tmp/fake /usr/bin/grep 2>/dev/null; echo /var/tmp/x.so > /etc/ld.so.preload)); "
             "select undef, undef, undef, 0.01 }' >/dev/null 2>&1 < /dev/null & sleep 1")
    assert await sandbox.kill_processes(keep_listening=True)
    assert {"/usr/bin/grep", "/etc/ld.so.preload"} <= set(await sandbox.restore_image_tools())  # the agent phase's
    code, files = await grade(sandbox, "sleep 1; if echo abc | grep -q zzz; then r=1; else r=0; fi; "
                                       "echo $r > /logs/verifier/reward.txt; cat /etc/ld.so.preload", tmp_path)
    assert files.get("reward.txt") == "0\n", files
    assert await sh(sandbox, "sha256sum /usr/bin/grep") == original
    await sandbox.kill_processes()
    assert (await sandbox.exec("test -s /etc/ld.so.preload")).exit_code == 1, "the preload list was written"
    assert (await sandbox.exec("touch /usr/bin/mine && rm /usr/bin/mine")).ok, "/usr stays read-only after grading"


@docker
async def test_the_grader_starts_clean_whatever_the_task_env_and_the_agents_home_hold(provider, tmp_path):
    sb = provider.create(new_spec(env={"BASH_ENV": "/root/.hook", "PERL5OPT": "-Mhook", "KEEP_ME": "yes"}))
    await sb.start()
    try:
        await sh(sb, "echo 'echo HOOKED' > /root/.hook; mkdir -p /root/.local/lib; echo 'echo HOOKED' >> /root/.bashrc")
        code, files = await grade(sb, "env > /logs/verifier/env; ls -A $HOME > /logs/verifier/home; "
                                      "echo 1 > /logs/verifier/reward.txt", tmp_path, env={"EXTRA": "1"})
        assert set(files["home"].split()) == {".bash_logout", ".bashrc", ".profile"}, "HOME is not the image's /etc/skel"
        env = dict(line.split("=", 1) for line in files["env"].splitlines() if "=" in line)
        assert "HOOKED" not in files["(output)"]
        assert "BASH_ENV" not in env and "PERL5OPT" not in env, env
        assert env["KEEP_ME"] == "yes" and env["EXTRA"] == "1" and env["PYTHONNOUSERSITE"] == "1"
        assert env["HOME"] != "/root" and not (await sb.exec(f"test -e {env['HOME']}")).ok, "HOME is visible outside"
    finally:
        await sb.stop()


@docker
async def test_a_replaced_shell_a_planted_sh_and_a_broken_passwd_leave_the_root_helpers_working(sandbox, tmp_path):
    await sh(sandbox, "(setsid tail -f /dev/null >/dev/null 2>&1 &) ; "
             "printf '#!/bin/bash\\nexit 0\\n' > /usr/local/bin/sh && chmod +x /usr/local/bin/sh; "  # earlier on PATH
             "cp /usr/local/bin/sh /usr/bin/dash; "  # /bin/sh -> dash
             "rm /etc/passwd && mkdir /etc/passwd")
    assert await sandbox.kill_processes() == []
    assert "tail" not in await states(sandbox)
    assert "/usr/bin/dash" in await sandbox.restore_image_tools()
    code, files = await grade(sandbox, "echo 1 > /logs/verifier/reward.txt", tmp_path)
    assert files.get("reward.txt") == "1\n", files
    await sandbox.write_file("/app/out.txt", "x")
    assert await sandbox.read_file("/app/out.txt") == b"x"


@docker
async def test_a_folder_the_grader_needs_behind_a_link_is_the_models_zero(sandbox, tmp_path):
    await sh(sandbox, "mkdir -p /elsewhere && ln -s /elsewhere /logs")
    with pytest.raises(GradingSabotagedError):
        await sandbox.fresh_folder("/logs/verifier")


@docker
async def test_kill_processes_with_the_pids_limit_exhausted_keeps_the_service_and_kills_the_bomb(base_image, tmp_path):
    sb = DockerProvider({"pids_limit": 64}).create(new_spec())
    await sb.start()
    try:
        await sh(sb, f"{SERVICE} sleep 1")
        await sb.exec("(bomb() { bomb | bomb & }; setsid bash -c \"$(declare -f bomb); bomb\" &) >/dev/null 2>&1; sleep 3",
                      timeout=30)
        for _ in range(60):  # the evidence kill_processes() would give for the model's 0
            if pids_exhausted(sb.container.pid):
                break
            await asyncio.sleep(0.25)
        else:
            pytest.fail("the bomb never filled the pids limit")
        kept = await sb.kill_processes(keep_listening=True, timeout=20)
        assert not pids_exhausted(sb.container.pid)
        assert [k.split(" ", 2)[2] for k in kept] == ["perl: tcp 0.0.0.0:8080"], kept
        code, files = await grade(sb, f"{READ_SERVICE} > /logs/verifier/got", tmp_path)
        assert files.get("got") == "served\n", files
    finally:
        await sb.stop()


@docker
async def test_grading_online_after_an_offline_agent_phase(sandbox, tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]

    def answer() -> None:
        conn, _ = server.accept()
        conn.sendall(b"from the host\n")
        conn.close()

    threading.Thread(target=answer, daemon=True).start()
    reach = f"exec 3<>/dev/tcp/127.0.0.1/{port} && cat <&3"
    assert not (await sandbox.exec(reach, timeout=10)).ok, "the agent phase reached the host"
    await sandbox.set_network(NetworkPolicy(mode="public"))
    code, files = await grade(sandbox, f"{reach} > /logs/verifier/got", tmp_path)
    assert files.get("got") == "from the host\n", files
    assert any("host's network" in n for n in sandbox.notes)
    threading.Thread(target=answer, daemon=True).start()
    assert (await sandbox.exec(reach, timeout=10)).stdout == "from the host\n", "a command after set_network is offline"
    await sandbox.set_network(NetworkPolicy(mode="none"))
    assert not (await sandbox.exec(reach, timeout=10)).ok, "set_network(none) left the network on"
    server.close()


@docker
async def test_a_grader_command_past_its_timeout_leaves_the_services_frozen(sandbox, tmp_path):
    await sh(sandbox, f"{SERVICE} sleep 1")
    await sandbox.kill_processes(keep_listening=True)
    await sandbox.fresh_folder("/tests")
    await sandbox.fresh_folder("/logs/verifier")
    await sandbox.write_file("/tests/test.sh", "sleep 30")
    with pytest.raises(TimeoutError):
        await sandbox.run_grader(["bash", "/tests/test.sh"], private=["/tests", "/logs/verifier"],
                                 collect="/logs/verifier", dest=tmp_path / "d", timeout=2)
    await asyncio.sleep(0.2)
    assert (await states(sandbox)).get("perl") == "T"
    assert (await sandbox.exec("touch /usr/bin/mine && rm /usr/bin/mine")).ok, "/usr stays read-only after a timeout"
