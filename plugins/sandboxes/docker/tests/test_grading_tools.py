"""restore_image_tools(): what the agent did to the image's executables and libraries is undone before grading."""

from __future__ import annotations

import uuid

import pytest

from tackroom import SandboxSpec
from tackroom_docker.tools import tool_roots

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
