"""The local (bubblewrap) sandbox: conformance, Dockerfile handling, failure modes."""

import asyncio
import json
import os
import signal

import pytest

import tackroom
from tackroom.testing import check_registered, sandbox_self_check
from tackroom_local import LocalSandboxProvider


def spec(tmp_path=None, **kw) -> tackroom.SandboxSpec:
    return tackroom.SandboxSpec(name="t", **kw)


def test_local_is_registered_through_the_entry_point():
    check_registered("sandbox", "local", distribution="tackroom-local")


async def test_local_sandbox_passes_the_conformance_suite():
    report = await sandbox_self_check(LocalSandboxProvider())
    assert report.timings["start_s"] < 2 and report.timings["stop_s"] < 2


async def test_processes_survive_between_execs_and_die_with_the_sandbox(tmp_path):
    sb = LocalSandboxProvider({"root_dir": str(tmp_path)}).create(spec())
    await sb.start()
    await sb.exec("nohup sleep 300 >/dev/null 2>&1 & echo $! > /tmp/pid")
    alive = await sb.exec("kill -0 $(cat /tmp/pid) && echo alive")
    assert alive.stdout.strip() == "alive"
    bwrap_pid = sb.namespaces.proc.pid
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
    os.killpg(sb.namespaces.proc.pid, signal.SIGKILL)
    await asyncio.sleep(0.2)
    with pytest.raises(tackroom.SandboxError, match="died|not running"):
        await sb.exec("true")
    await sb.stop()


async def test_expose_without_network_explains_the_alternative():
    sb = LocalSandboxProvider().create(spec())
    async with sb:
        with pytest.raises(tackroom.SandboxError, match="allow_internet"):
            await sb.expose(8080)


def test_the_options_document_the_limits():
    fields = LocalSandboxProvider.Options.model_fields
    assert fields["pids_limit"].default == 512 and "fork bomb" in fields["pids_limit"].description
    assert fields["limits"].default == "auto" and "rlimit" in fields["limits"].description
    assert "root inside the sandbox maps to" in fields["host_uid"].description
    with pytest.raises(Exception, match="pids_limit"):
        LocalSandboxProvider({"pids_limit": 2})


async def test_kill_processes_restarts_the_keeper_and_keeps_files(tmp_path):
    sb = LocalSandboxProvider({"root_dir": str(tmp_path)}).create(spec())
    async with sb:
        await sb.exec("echo data > /app/kept; echo shm > /dev/shm/gone; nohup sleep 300 >/dev/null 2>&1 &")
        keeper, bwrap = sb.namespaces.keeper_pid, sb.namespaces.proc.pid
        await sb.kill_processes()
        assert (sb.namespaces.keeper_pid, sb.namespaces.proc.pid) != (keeper, bwrap)
        r = await sb.exec("cat /app/kept; ls /dev/shm; pgrep -c sleep")
        assert r.stdout.split("\n")[:2] == ["data", "0"], r.stdout  # files stay, /dev/shm is a fresh tmpfs
        marker = json.loads(sb.marker.read_text())
        assert marker["bwrap"][0] == sb.namespaces.proc.pid and marker["pid"] == os.getpid()


async def test_upload_semantics_replace_the_destination_and_follow_parents_that_stay_inside(tmp_path):
    sb = LocalSandboxProvider({"root_dir": str(tmp_path / "roots")}).create(spec())
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "run.sh").write_text("echo run\n")
    (src / "sub" / "run.sh").chmod(0o755)
    os.utime(src / "sub" / "run.sh", ns=(1_000_000_000, 1_000_000_000))
    async with sb:
        # a legitimate link among the parents (inside the writable roots) is followed ...
        await sb.exec("mkdir -p /app/v2 && ln -s /app/v2 /app/current && mkdir /app/dir-here && echo x > /app/file-here")
        await sb.upload(src, "/app/current/pkg")
        # ... while whatever sits at the destination itself is replaced
        await sb.upload(src / "sub" / "run.sh", "/app/dir-here")
        await sb.upload(src, "/app/file-here")
        r = await sb.exec("[ -L /app/current ] && ls /app/v2/pkg/sub && [ -f /app/dir-here ] && ls /app/file-here "
                          "&& stat -c '%a %Y %u' /app/v2/pkg/sub/run.sh && /app/v2/pkg/sub/run.sh")
        assert r.stdout.split("\n") == ["run.sh", "sub", "755 1 0", "run", ""], r
        if os.geteuid() == 0:
            host = sb.root / "app" / "v2" / "pkg" / "sub" / "run.sh"
            assert host.stat().st_uid == sb.uid, "uploaded files belong to the sandbox's root, not the host's"
        with pytest.raises(tackroom.SandboxPathError, match="writable roots"):
            await sb.upload(src / "sub" / "run.sh", "/usr/local/bin/run.sh")
        with pytest.raises(tackroom.SandboxPathError):
            await sb.upload(src / "sub" / "run.sh", "/app")


async def test_a_root_dir_that_other_users_cannot_enter_still_works(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    sb = LocalSandboxProvider({"root_dir": str(private / "roots")}).create(spec())
    async with sb:
        if os.geteuid() == 0:
            assert sb.keeper.stage is not None, "bwrap runs as the sandbox's uid, which cannot pass through a 0700 folder"
        await sb.write_file("/app/a.txt", "a")
        assert (await sb.exec("cat /app/a.txt")).stdout == "a"
        await sb.kill_processes()
        assert (await sb.exec("cat /app/a.txt")).stdout == "a"
    assert not any((private / "roots").iterdir())


async def test_the_owner_marker_sits_beside_the_root_and_goes_with_it(tmp_path):
    sb = LocalSandboxProvider({"root_dir": str(tmp_path)}).create(spec())
    async with sb:
        assert sb.marker.parent == sb.root.parent and sb.marker.name == sb.root.name + ".owner.json"
        data = json.loads(sb.marker.read_text())
        assert data["root"] == sb.root.name and data["pid"] == os.getpid() and data["start_time"]
        listing = await sb.exec("ls -A / /app /tmp")
        reach = await sb.exec(f"cat {sb.marker}")
        assert "owner" not in listing.stdout and not reach.ok, "the agent can neither see nor reach the marker"
    assert not sb.marker.exists() and not sb.root.exists()


async def test_the_host_environment_does_not_reach_the_sandbox(monkeypatch):
    monkeypatch.setenv("TACKROOM_TEST_HOST_SECRET", "hunter2")
    sb = LocalSandboxProvider().create(spec(env={"FROM_SPEC": "yes"}))
    async with sb:
        r = await sb.exec("env")
        assert "FROM_SPEC=yes" in r.stdout and "hunter2" not in r.stdout and "TACKROOM_TEST_HOST_SECRET" not in r.stdout


async def test_dockerfile_copy_of_a_file_onto_an_existing_folder_puts_it_inside(tmp_path):
    env = tmp_path / "environment"
    env.mkdir()
    (env / "tool.sh").write_text("echo tool\n")
    (env / "Dockerfile").write_text("RUN mkdir -p /opt/tools\nCOPY tool.sh /opt/tools\nCOPY tool.sh /opt/renamed.sh\n")
    async with LocalSandboxProvider().create(spec(environment_dir=env)) as sb:
        r = await sb.exec("cat /opt/tools/tool.sh /opt/renamed.sh")
        assert r.stdout == "echo tool\necho tool\n", r


async def test_transfer_paths_with_dot_segments_and_links_to_parents_resolve_as_the_sandbox_would(tmp_path):
    """``.`` and empty segments are skipped; a link whose target ends in ``..`` (walked after it, as the last
    step) lands on the parent, as the kernel would resolve it; ``..`` written in a path is refused."""
    sb = LocalSandboxProvider({"root_dir": str(tmp_path / "roots")}).create(spec())
    await sb.start()
    try:
        await sb.exec("mkdir -p /app/d/e && echo top > /app/top.txt && echo deep > /app/d/e/deep.txt "
                      "&& ln -s .. /app/d/e/up && ln -s ../.. /app/d/e/upup")
        await sb.download("/app/d/e/up", tmp_path / "d")
        assert (tmp_path / "d" / "e" / "deep.txt").read_text() == "deep\n"
        await sb.download("/app/./d//e/upup/top.txt", tmp_path / "top.txt")
        assert (tmp_path / "top.txt").read_text() == "top\n"
        (tmp_path / "up.txt").write_text("up")
        await sb.upload(tmp_path / "up.txt", "/app/d/e/up/./new/up.txt")
        assert (await sb.exec("cat /app/d/new/up.txt")).stdout == "up"
        with pytest.raises(tackroom.SandboxPathError, match="contains '..'"):
            await sb.download("/app/d/e/..", tmp_path / "refused")
    finally:
        await sb.stop()
