"""TarTransfer (the upload/download of Modal and Daytona) never follows what the agent planted inside the sandbox.

The provider SDKs are not reachable here, so the mixin runs on the local sandbox with whole-file moves done
through ``exec`` (as an SDK's file API would); what is checked is the sandbox-side script both share."""

from __future__ import annotations

import base64
import shlex

import pytest

from tackroom import SandboxPathError, SandboxSpec
from tackroom_local import LocalSandbox, LocalSandboxOptions
from tackroom_sandbox_kit import TarTransfer


class TarLocal(TarTransfer, LocalSandbox):
    async def _put(self, data: bytes, remote: str, timeout: float) -> None:
        r = await self.exec(f"cat > {shlex.quote(remote)}", stdin=data, timeout=timeout)
        assert r.ok, r.stderr

    async def _get(self, remote: str, timeout: float) -> bytes:
        r = await self.exec(f"base64 -w0 < {shlex.quote(remote)}", timeout=timeout)
        assert r.ok, r.stderr
        return base64.b64decode(r.stdout)

    def _resolve(self, path: str) -> str:
        return path if path.startswith("/") else f"{self.workdir}/{path}"


@pytest.fixture
async def sb(tmp_path):
    box = TarLocal(SandboxSpec(name="tar"), LocalSandboxOptions(root_dir=str(tmp_path / "roots")))
    await box.start()
    try:
        yield box
    finally:
        await box.stop()


async def sh(box, cmd: str) -> str:
    r = await box.exec(cmd)
    assert r.ok, (cmd, r.stderr)
    return r.stdout


async def test_a_link_above_the_destination_is_refused_and_nothing_lands_where_it_points(sb, tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    await sh(sb, "mkdir -p /tmp/agent && ln -s /tmp/agent /app/graders")
    with pytest.raises(SandboxPathError, match="symbolic link"):
        await sb.upload(tests, "/app/graders/tests")
    assert await sh(sb, "ls -A /tmp/agent") == ""


async def test_links_and_fifos_at_the_destination_are_replaced_not_followed(sb, tmp_path):
    src = tmp_path / "up.txt"
    src.write_text("graded")
    await sh(sb, "echo original > /tmp/victim && ln -s /tmp/victim /app/up.txt && mkfifo /app/fifo.txt")
    await sb.upload(src, "/app/up.txt")
    await sb.upload(src, "/app/fifo.txt")
    assert await sh(sb, "cat /tmp/victim") == "original\n"
    assert await sh(sb, "cat /app/up.txt /app/fifo.txt; [ -L /app/up.txt ] || echo real") == "gradedgradedreal\n"


async def test_a_directory_upload_replaces_planted_links_at_its_subdirectories(sb, tmp_path):
    tree = tmp_path / "tests"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "t.py").write_text("assert True\n")
    await sh(sb, "mkdir -p /tmp/agent /app/tests && ln -s /tmp/agent /app/tests/sub")
    await sb.upload(tree, "/app/tests")
    assert await sh(sb, "ls -A /tmp/agent") == ""
    assert await sh(sb, "cat /app/tests/sub/t.py") == "assert True\n"


async def test_a_download_through_a_link_is_refused(sb, tmp_path):
    await sh(sb, "mkdir -p /tmp/secret && echo s > /tmp/secret/x && ln -s /tmp/secret /app/out")
    with pytest.raises(SandboxPathError, match="symbolic link"):
        await sb.download("/app/out", tmp_path / "got")
    with pytest.raises(SandboxPathError, match="symbolic link"):
        await sb.download("/app/out/x", tmp_path / "x")
    await sh(sb, "mkdir -p /app/real && echo r > /app/real/y")
    await sb.download("/app/real", tmp_path / "real")
    assert (tmp_path / "real" / "y").read_text() == "r\n"
