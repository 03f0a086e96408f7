"""``storage_mb`` on docker: writing past it fails inside the container (ENOSPC), and the container goes on."""

from __future__ import annotations

import uuid

import pytest

from tackroom import SandboxSpec
from tackroom_docker.engine import EngineInfo

docker = pytest.mark.docker


@docker
async def test_writing_past_storage_mb_fails_inside_and_the_sandbox_goes_on(provider):
    sb = provider.create(SandboxSpec(name=f"disk-{uuid.uuid4().hex[:8]}", storage_mb=64))
    await sb.start()
    try:
        for where in (sb.workdir, "/tmp"):
            filled = await sb.exec(f"dd if=/dev/zero of={where}/fill bs=1M count=200 2>&1")
            assert filled.exit_code != 0 and "No space left on device" in filled.stdout, filled
            size = int((await sb.exec(f"stat -c %s {where}/fill")).stdout)
            assert size <= 64 * 1024 * 1024
        assert (await sb.exec(f"rm {sb.workdir}/fill && echo 42 > {sb.workdir}/answer.txt && cat {sb.workdir}/answer.txt")).stdout == "42\n"
        info = await sb.cli.info()
        if not info.storage_quota:
            assert any("storage_mb = 64" in n and "not limited" in n for n in sb.notes), sb.notes
    finally:
        await sb.stop()


@docker
async def test_files_the_image_put_in_the_workdir_are_still_there_under_storage_mb(provider, tmp_path):
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /work\nRUN echo from-image > /work/given.txt\n")
    sb = provider.create(SandboxSpec(name=f"disk-{uuid.uuid4().hex[:8]}", storage_mb=32, environment_dir=tmp_path / "env"))
    await sb.start()
    try:
        assert (await sb.exec("cat given.txt")).stdout == "from-image\n"
    finally:
        await sb.stop()


def test_the_quota_is_used_only_where_the_storage_driver_has_one():
    base = {"server_version": "27", "ncpu": 2, "mem_total": 1, "init_binary": "docker-init", "local": True}
    assert EngineInfo(**base, storage_driver="overlay2", backing_fs="xfs").storage_quota
    assert not EngineInfo(**base, storage_driver="overlay2", backing_fs="extfs").storage_quota
    assert EngineInfo(**base, storage_driver="btrfs").storage_quota
