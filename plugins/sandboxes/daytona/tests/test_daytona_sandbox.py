"""The daytona provider against specced SDK mocks: exact calls, error paths, cancellation, the cap."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from unittest import mock

import daytona
import pytest

from tackroom import SandboxBuildError, SandboxError, SandboxPathError, SandboxSpec, SandboxTimeoutError
from tackroom.testing import check_registered
from tackroom_daytona.provider import DaytonaProvider
from tackroom_daytona.sandbox import KILLED

FAST = {"retry_wait_sec": 0, "api_timeout_sec": 5}


def spec(**kw) -> SandboxSpec:  # type: ignore[no-untyped-def]
    return SandboxSpec(name="trial-1", **kw)


def test_registered_lazily() -> None:
    check_registered("sandbox", "daytona", distribution="tackroom-daytona")


async def test_start_creates_with_spec_limits(fake_daytona: Any) -> None:
    p = DaytonaProvider(FAST)
    sb = p.create(spec(image="python:3.12-slim", cpus=1.5, memory_mb=3000, env={"A": "1"}, labels={"world": "w1"}))
    with mock.patch.object(daytona.Image, "base", autospec=True, wraps=daytona.Image.base) as base:
        await sb.start()
    base.assert_called_once_with("python:3.12-slim")
    fake_daytona.cls.assert_called_once_with()  # credentials come from the SDK's env vars only
    (params,), kwargs = fake_daytona.client.create.await_args
    assert kwargs == {"timeout": 720.0}
    assert isinstance(params, daytona.CreateSandboxFromImageParams)
    assert isinstance(params.image, daytona.Image)
    assert (params.name, params.env_vars, params.network_block_all, params.auto_stop_interval) == ("trial-1", {"A": "1"}, True, 60)
    assert params.labels == {"world": "w1", "tackroom.managed": "1", "tackroom._trial": "trial-1"}
    assert (params.resources.cpu, params.resources.memory) == (2, 3)
    fake_daytona.sandbox.process.exec.assert_awaited()
    await sb.stop()
    fake_daytona.client.delete.assert_awaited_once_with(fake_daytona.sandbox, timeout=5)
    assert p.slots._value == p.options.max_concurrent


async def test_dockerfile_image_made_once_per_world(fake_daytona: Any, tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM debian:bookworm-slim\nRUN true\n")
    p = DaytonaProvider(FAST)
    with mock.patch.object(daytona.Image, "from_dockerfile", autospec=True, wraps=daytona.Image.from_dockerfile) as made:
        for i in range(3):
            sb = p.create(SandboxSpec(name=f"t{i}", environment_dir=tmp_path, allow_internet=True))
            await sb.start()
            await sb.stop()
    made.assert_called_once_with(tmp_path / "Dockerfile")
    images = {id(c.args[0].image) for c in fake_daytona.client.create.await_args_list}
    assert len(images) == 1 and fake_daytona.client.create.await_count == 3
    assert fake_daytona.client.create.await_args.args[0].network_block_all is False


async def test_broken_dockerfile_is_a_task_error(fake_daytona: Any, tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM debian\nRUN false\n")
    fake_daytona.client.create.side_effect = daytona.DaytonaError("Image build failed: RUN false exited 1")
    p = DaytonaProvider(FAST)
    with pytest.raises(SandboxBuildError, match="fix the Dockerfile") as info:
        await p.create(spec(environment_dir=tmp_path)).start()
    assert info.value.error_class == "task"
    assert p.slots._value == p.options.max_concurrent


async def test_missing_credentials_name_the_env_vars(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(SandboxError, match="DAYTONA_API_KEY"):
        await DaytonaProvider(FAST).create(spec()).start()


async def test_transient_create_failure_is_retried(fake_daytona: Any) -> None:
    fake_daytona.client.create.side_effect = [
        daytona.DaytonaConnectionError("reset"), daytona.DaytonaServiceUnavailableError("503"), fake_daytona.sandbox,
    ]
    sb = DaytonaProvider(FAST).create(spec())
    await sb.start()
    assert fake_daytona.client.create.await_count == 3 and sb.sandbox is fake_daytona.sandbox


async def test_hanging_create_times_out_and_frees_the_slot(fake_daytona: Any) -> None:
    async def hang(*a, **k):  # type: ignore[no-untyped-def]
        await asyncio.sleep(3600)

    fake_daytona.client.create.side_effect = hang
    p = DaytonaProvider({**FAST, "retries": 1})
    with pytest.raises(SandboxTimeoutError, match="did not answer"):
        await asyncio.wait_for(p.create(spec(build_timeout_sec=0.1, start_timeout_sec=0.1)).start(), 30)
    assert p.slots._value == p.options.max_concurrent


async def test_cancel_during_create_deletes_the_sandbox(fake_daytona: Any) -> None:
    landed = asyncio.Event()

    async def slow_create(*a, **k):  # type: ignore[no-untyped-def]
        landed.set()
        await asyncio.sleep(0.3)
        return fake_daytona.sandbox

    fake_daytona.client.create.side_effect = slow_create
    p = DaytonaProvider(FAST)
    task = asyncio.create_task(p.create(spec()).start())
    await landed.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    fake_daytona.client.delete.assert_awaited_once_with(fake_daytona.sandbox, timeout=5)
    assert p.slots._value == p.options.max_concurrent


async def test_exec_reads_stream_files_and_feeds_stdin(fake_daytona: Any, response: Any) -> None:
    sb = DaytonaProvider(FAST).create(spec())
    await sb.start()
    proc = fake_daytona.sandbox.process

    async def run(script: str, timeout: int | None = None, **kw) -> daytona.ExecuteResponse:  # type: ignore[no-untyped-def]
        if "setsid" in script and "echo hi" in script:
            base = script.split("<")[1].split(".in")[0]
            assert fake_daytona.files[f"{base}.in"] == b"in"
            fake_daytona.files[f"{base}.out"] = b"out\n"
            fake_daytona.files[f"{base}.err"] = b"err\n"
            return response(3, "")
        return response(0)

    proc.exec.side_effect = run
    r = await sb.exec("echo hi", cwd="/tmp", env={"B": "x"}, timeout=7.5, stdin="in")
    assert (r.exit_code, r.stdout, r.stderr, r.truncated) == (3, "out\n", "err\n", False)
    script = [c for c in proc.exec.await_args_list if "echo hi" in c.args[0]][0]
    assert script.kwargs == {"timeout": 18}
    assert script.args[0].startswith("cd /tmp || exit 1; setsid env B=x bash -c 'echo hi'")
    assert proc.exec.await_args.args[0].startswith("rm -f /tmp/.tackroom-exec-")
    await sb.exec("pwd")
    assert [c for c in proc.exec.await_args_list if "bash -c pwd " in c.args[0]][0].args[0].startswith("cd /app || exit 1; ")


async def test_exec_timeout_raises(fake_daytona: Any, response: Any) -> None:
    sb = DaytonaProvider(FAST).create(spec())
    await sb.start()
    fake_daytona.sandbox.process.exec.side_effect = lambda script, **kw: response(KILLED if "setsid" in script else 0)
    with pytest.raises(SandboxTimeoutError, match="ran past 2s"):
        await sb.exec("sleep 600", timeout=2)


async def test_exec_transient_then_success(fake_daytona: Any, response: Any) -> None:
    sb = DaytonaProvider(FAST).create(spec())
    await sb.start()
    fake_daytona.sandbox.process.exec.side_effect = [daytona.DaytonaConnectionError("reset"), response(0, "TRUNCATED\n"), response(0)]
    r = await sb.exec("true")
    assert r.ok and r.truncated and fake_daytona.sandbox.process.exec.await_count == 2 + 3  # start's mkdir (run + rm), then fail, run, rm


async def test_stop_is_idempotent_and_exec_after_stop_fails(fake_daytona: Any) -> None:
    p = DaytonaProvider(FAST)
    await p.create(spec()).stop()
    sb = p.create(spec())
    await sb.start()
    await sb.stop()
    await sb.stop()
    fake_daytona.client.delete.assert_awaited_once()
    with pytest.raises(SandboxError, match="not running"):
        await sb.exec("true")


async def test_concurrency_cap(fake_daytona: Any) -> None:
    p = DaytonaProvider({**FAST, "max_concurrent": 1})
    first = p.create(spec())
    await first.start()
    second = asyncio.create_task(p.create(SandboxSpec(name="t2")).start())
    await asyncio.sleep(0.05)
    assert not second.done() and fake_daytona.client.create.await_count == 1
    await first.stop()
    await asyncio.wait_for(second, 5)
    assert fake_daytona.client.create.await_count == 2


async def test_traversal_and_missing_download(fake_daytona: Any, response: Any, tmp_path: Path) -> None:
    sb = DaytonaProvider(FAST).create(spec())
    await sb.start()
    with pytest.raises(SandboxPathError):
        await sb.download("../../etc/passwd", tmp_path / "p")

    async def run(script: str, **kw) -> daytona.ExecuteResponse:  # type: ignore[no-untyped-def]
        if "setsid" in script:
            fake_daytona.files[script.split(">")[1].split(" ")[0]] = b"missing\n"
        return response(0)

    fake_daytona.sandbox.process.exec.side_effect = run
    with pytest.raises(FileNotFoundError):
        await sb.download("/nope", tmp_path / "x")


async def test_expose_returns_a_signed_preview_url(fake_daytona: Any) -> None:
    link = mock.Mock(url="https://8080-abc.proxy.daytona.works?token=t")
    fake_daytona.sandbox.create_signed_preview_url.return_value = link
    sb = DaytonaProvider(FAST).create(spec())
    await sb.start()
    assert await sb.expose(8080) == link.url
    fake_daytona.sandbox.create_signed_preview_url.assert_awaited_once_with(8080, expires_in_seconds=3600, request_timeout=5)


async def test_cleanup_deletes_labelled_sandboxes(fake_daytona: Any) -> None:
    async def listed(query):  # type: ignore[no-untyped-def]
        assert query.labels == {"tackroom.managed": "1"}
        for sb in (fake_daytona.sandbox, fake_daytona.sandbox):
            yield sb

    fake_daytona.client.list = mock.MagicMock(side_effect=listed)
    assert await DaytonaProvider(FAST).cleanup() == 2
    assert fake_daytona.client.delete.await_count == 2


def test_storage_mb_and_tool_restores_are_documented_gaps_said_in_the_notes() -> None:
    sb = DaytonaProvider(FAST).create(spec(storage_mb=256))
    assert any("storage_mb = 256 is not enforced" in n for n in sb.notes)
    assert asyncio.run(sb.restore_image_tools()) is None  # the runtime notes that grading used the agent's tools


async def test_an_allowlist_is_not_declared_and_one_that_reaches_the_sandbox_anyway_gets_no_network(
        fake_daytona: Any) -> None:
    assert "network_allowlist" not in DaytonaProvider.capabilities  # the runtime refuses such a task before the run
    sb = DaytonaProvider(FAST).create(spec(image="python:3.12-slim",
                                           network={"mode": "allowlist", "allowed_hosts": ["pypi.org"]}))
    await sb.start()
    await sb.stop()
    assert fake_daytona.client.create.await_args.args[0].network_block_all is True  # fail-closed, never the internet
