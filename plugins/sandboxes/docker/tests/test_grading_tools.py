"""restore_image_tools(): what the agent did to the image's executables and libraries is undone before grading."""

from __future__ import annotations

import uuid

import pytest

from tackroom import SandboxSpec
from tackroom_docker.tools import package_versions, tool_roots

docker = pytest.mark.docker


@pytest.fixture
async def sandbox(provider):
    sb = provider.create(SandboxSpec(name=f"tools-{uuid.uuid4().hex[:8]}"))
    await sb.start()
    try:
        yield sb
    finally:
        await sb.stop()


async def out(sb, cmd: str) -> str:
    result = await sb.exec(cmd)
    return result.stdout.strip()


@docker
async def test_changed_deleted_and_shadowing_tools_come_back_and_the_agents_own_stay(sandbox):
    original = await out(sandbox, "sha256sum /usr/bin/grep")
    await sandbox.exec(
        "printf '#!/bin/sh\\nexit 0\\n' > /tmp/fake && chmod +x /tmp/fake; "
        "cp /tmp/fake /usr/bin/grep; cp /tmp/fake /usr/local/bin/sed; rm -f /usr/bin/tail; "  # changed, shadow, deleted
        "cp /tmp/fake /usr/local/bin/my-tool; "  # the agent's own tool: stays
        "echo /tmp/evil.so > /etc/ld.so.preload; "
        "mkdir -p /app/keep && cp /tmp/fake /app/keep/grep")
    restored = await sandbox.restore_image_tools(keep=["/app/keep"])
    assert {"/usr/bin/grep", "/usr/local/bin/sed", "/usr/bin/tail", "/etc/ld.so.preload"} <= set(restored), restored
    assert await out(sandbox, "sha256sum /usr/bin/grep") == original
    assert (await sandbox.exec("echo abc | grep -q zzz")).exit_code == 1, "grep is still the agent's"
    assert await out(sandbox, "command -v sed") == "/usr/bin/sed"
    assert await out(sandbox, "echo a; echo b | tail -n1") == "a\nb"
    assert (await sandbox.exec("test -e /etc/ld.so.preload")).exit_code == 1
    assert (await sandbox.exec("test -x /usr/local/bin/my-tool && test -x /app/keep/grep")).ok
    assert await sandbox.restore_image_tools() == [], "a second pass found more to do"


@docker
async def test_an_untouched_container_costs_one_diff(sandbox, monkeypatch):
    calls: list[list[str]] = []
    real = sandbox.cli.run

    async def run(args, **kw):
        calls.append(list(args))
        return await real(args, **kw)

    monkeypatch.setattr(sandbox.cli, "run", run)
    assert await sandbox.restore_image_tools() == []
    assert [c[:2] for c in calls] == [["container", "diff"]]


def test_tool_roots_follow_path_but_never_the_workdir_or_tmp():
    roots = tool_roots("/opt/venv/bin:/app/node_modules/.bin:/tmp/bin:/usr/bin:/custom/tools", ["/app"])
    assert "/opt/venv" in roots and "/custom/tools" in roots and "/usr" in roots
    assert not any(r.startswith(("/app", "/tmp")) for r in roots), roots


@docker
async def test_a_tool_the_agent_adds_in_usr_bin_of_a_merged_usr_image_stays(sandbox):
    # debian:bookworm-slim has /bin -> usr/bin: the agent's /usr/bin/mytool is also /bin/mytool, one file.
    assert await out(sandbox, "readlink /bin") == "usr/bin"
    await sandbox.exec("printf '#!/bin/sh\\necho mine\\n' > /usr/bin/mytool && chmod +x /usr/bin/mytool; "
                       "printf 'x' > /usr/lib/x86_64-linux-gnu/libmine.so.1")
    restored = await sandbox.restore_image_tools()
    assert restored == [], restored
    assert await out(sandbox, "mytool") == "mine"
    assert (await sandbox.exec("test -f /usr/lib/x86_64-linux-gnu/libmine.so.1")).ok


@docker
async def test_restore_reads_the_whole_diff_however_many_files_the_agent_added(sandbox):
    # ~1.5 MB of diff lines ahead of the changed tool (the diff lists paths in order): more than one output cap.
    await sandbox.exec("mkdir -p /etc/0junk && cd /etc/0junk && for i in $(seq 6000); do : > $(printf %0240d $i); done; "
                       "printf '#!/bin/sh\\nexit 0\\n' > /usr/bin/grep")
    restored = await sandbox.restore_image_tools()
    assert "/usr/bin/grep" in restored
    assert (await sandbox.exec("echo abc | grep -q zzz")).exit_code == 1, "grep is still the agent's"


@docker
async def test_start_up_hooks_the_agent_adds_are_removed_wherever_an_interpreter_looks(sandbox):
    await sandbox.exec(
        "mkdir -p /etc/perl && printf 'package strict; print \"pwned\\\\n\"; 1;\\n' > /etc/perl/strict.pm; "  # first on perl's @INC
        "mkdir -p /usr/local/share/perl/5.36.0 && printf 'package warnings; print \"pwned\\\\n\"; 1;\\n' "
        "> /usr/local/share/perl/5.36.0/warnings.pm; "  # earlier on @INC than perl-base's warnings.pm
        "mkdir -p /usr/local/lib/python3.11/dist-packages /opt/tool && echo 'import os' > /usr/local/lib/python3.11/dist-packages/evil.pth; "
        "echo 'print(1)' > /opt/tool/sitecustomize.py; echo 'print(1)' > /usr/local/lib/python3.11/dist-packages/usercustomize.py; "
        "echo 'mine' > /usr/local/share/perl/5.36.0/Mine.pm; "
        "echo 'echo HOOKED' > /etc/profile.d/zz-agent.sh; echo 'echo HOOKED' >> /etc/skel/.bashrc")
    assert "pwned" in await out(sandbox, "perl -e 'use strict; use warnings; print qq(ok\\n)'")
    restored = set(await sandbox.restore_image_tools())
    assert {"/etc/perl/strict.pm", "/usr/local/share/perl/5.36.0/warnings.pm", "/opt/tool/sitecustomize.py",
            "/usr/local/lib/python3.11/dist-packages/evil.pth",
            "/usr/local/lib/python3.11/dist-packages/usercustomize.py", "/etc/profile.d/zz-agent.sh",
            "/etc/skel/.bashrc"} <= restored, restored
    assert "HOOKED" not in await out(sandbox, "cat /etc/skel/.bashrc")
    assert await out(sandbox, "perl -e 'use strict; use warnings; print qq(ok\\n)'") == "ok"
    assert (await sandbox.exec("test -f /usr/local/share/perl/5.36.0/Mine.pm")).ok, "a module of its own stays"


@docker
async def test_grader_tools_the_image_put_outside_path_come_back_and_config_stays(provider, tmp_path):
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\n"
        "RUN mkdir -p /opt/grader/lib /etc/myapp && printf '#!/bin/sh\\necho real\\n' > /opt/grader/check "
        "&& chmod +x /opt/grader/check && echo 'REAL = 1' > /opt/grader/lib/helpers.py "
        "&& echo 'port=80' > /etc/myapp/app.conf\n")
    sb = provider.create(SandboxSpec(name=f"tools-{uuid.uuid4().hex[:8]}", environment_dir=env))
    await sb.start()
    try:
        await sb.exec("printf '#!/bin/sh\\necho fake\\n' > /opt/grader/check; echo 'REAL = 0' > /opt/grader/lib/helpers.py; "
                      "echo 'port=8080' > /etc/myapp/app.conf")
        restored = set(await sb.restore_image_tools())
        assert {"/opt/grader/check", "/opt/grader/lib/helpers.py"} <= restored, restored
        assert await out(sb, "/opt/grader/check") == "real"
        assert await out(sb, "cat /opt/grader/lib/helpers.py") == "REAL = 1"
        assert await out(sb, "cat /etc/myapp/app.conf") == "port=8080", "config the agent was asked to change stays"
        await sb.exec("rm -rf /opt/grader")
        assert set(await sb.restore_image_tools()) >= {"/opt/grader/check", "/opt/grader/lib/helpers.py"}
        assert await out(sb, "/opt/grader/check") == "real"
    finally:
        await sb.stop()


def test_package_versions_read_installed_stanzas_only():
    status = ("Package: grep\nStatus: install ok installed\nVersion: 3.8-5\nDescription: x\n y\n\n"
              "Package: gone\nStatus: deinstall ok config-files\nVersion: 1\n\n"
              "Package: sed\nStatus: install ok installed\nVersion: 4.9-1\n")
    assert package_versions(status) == {"grep": "3.8-5", "sed": "4.9-1"}


@docker
async def test_files_of_a_package_the_agent_upgraded_in_place_come_back_and_the_notes_say_so(sandbox):
    # what an `apt-get install --only-upgrade grep` leaves: grep's files changed and dpkg's database naming the upgrade
    await sandbox.exec("cp /bin/true /usr/bin/grep && "
                       "sed -i '/^Package: grep$/,/^$/s/^Version: .*/Version: 99.0-agent/' /var/lib/dpkg/status")
    restored = await sandbox.restore_image_tools()
    assert "/usr/bin/grep" in restored
    note = next((n for n in sandbox.notes if "upgraded packages" in n), None)
    assert note is not None and "grep " in note and "-> 99.0-agent" in note, sandbox.notes
    assert "put back" in note and (await sandbox.exec("echo abc | grep -q zzz")).exit_code == 1
