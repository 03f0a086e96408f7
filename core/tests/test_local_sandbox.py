"""The local (bubblewrap) sandbox: conformance, Dockerfile handling, failure modes."""

import asyncio
import os
import signal

import pytest

import tackroom
from tackroom.builtins.local_sandbox import LocalSandboxProvider
from tackroom.testing import check_registered, sandbox_self_check


def spec(tmp_path=None, **kw) -> tackroom.SandboxSpec:
    return tackroom.SandboxSpec(name="t", **kw)


def test_local_is_registered_through_the_entry_point():
    check_registered("sandbox", "local", distribution="tackroom")


async def test_local_sandbox_passes_the_conformance_suite():
    report = await sandbox_self_check(LocalSandboxProvider())
    assert report.timings["start_s"] < 2 and report.timings["stop_s"] < 2


async def test_processes_survive_between_execs_and_die_with_the_sandbox(tmp_path):
    sb = LocalSandboxProvider({"root_dir": str(tmp_path)}).create(spec())
    await sb.start()
    await sb.exec("nohup sleep 300 >/dev/null 2>&1 & echo $! > /tmp/pid")
    alive = await sb.exec("kill -0 $(cat /tmp/pid) && echo alive")
    assert alive.stdout.strip() == "alive"
    bwrap_pid = sb._proc.pid
    await sb.stop()
    await sb.stop()  # idempotent
    assert not list(tmp_path.iterdir()), "per-trial root is removed"
    with pytest.raises(ProcessLookupError):
        os.kill(bwrap_pid, 0)


async def test_dockerfile_workdir_copy_env_run_are_applied(tmp_path):
    env = tmp_path / "environment"
    (env / "data").mkdir(parents=True)
    (env / "data" / "a.txt").write_text("alpha\n")
    (env / "tool.sh").write_text("echo tool $GREETING\n")
    (env / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\n"
        "WORKDIR /app/work\n"
        "ENV GREETING=hi OTHER=\"two words\"\n"
        "COPY data/ ./data/\n"
        "COPY tool.sh /opt/tool.sh\n"
        "RUN echo built > built.txt && \\\n    chmod +x /opt/tool.sh\n"
    )
    sb = LocalSandboxProvider().create(spec(environment_dir=env))
    async with sb:
        r = await sb.exec("pwd; cat data/a.txt built.txt; /opt/tool.sh; echo $OTHER")
        assert r.stdout.split("\n")[:5] == ["/app/work", "alpha", "built", "tool hi", "two words"]
    assert any("FROM debian:bookworm-slim" in n for n in sb.notes)


async def test_a_failing_run_line_is_a_task_build_error(tmp_path):
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text("FROM x\nRUN echo oops >&2; exit 3\n")
    sb = LocalSandboxProvider().create(spec(environment_dir=env))
    with pytest.raises(tackroom.SandboxBuildError, match=r"Dockerfile:2: RUN failed with exit 3: oops") as err:
        await sb.start()
    assert err.value.error_class == "task"
    await sb.stop()


async def test_copy_to_a_read_only_path_is_a_task_build_error(tmp_path):
    env = tmp_path / "environment"
    env.mkdir()
    (env / "f").write_text("x")
    (env / "Dockerfile").write_text("COPY f /usr/local/bin/f\n")
    sb = LocalSandboxProvider().create(spec(environment_dir=env))
    with pytest.raises(tackroom.SandboxBuildError, match="outside the local sandbox's writable roots"):
        await sb.start()
    await sb.stop()


async def test_missing_bwrap_says_how_to_install_it():
    sb = LocalSandboxProvider({"bwrap": "bwrap-not-installed-here"}).create(spec())
    with pytest.raises(tackroom.SandboxError, match="apt-get install bubblewrap"):
        await sb.start()


async def test_a_sandbox_that_dies_gives_sandbox_error_on_next_exec():
    sb = LocalSandboxProvider().create(spec())
    await sb.start()
    os.killpg(sb._proc.pid, signal.SIGKILL)
    await asyncio.sleep(0.2)
    with pytest.raises(tackroom.SandboxError, match="died|not running"):
        await sb.exec("true")
    await sb.stop()


async def test_expose_without_network_explains_the_alternative():
    sb = LocalSandboxProvider().create(spec())
    async with sb:
        with pytest.raises(tackroom.SandboxError, match="allow_internet"):
            await sb.expose(8080)
