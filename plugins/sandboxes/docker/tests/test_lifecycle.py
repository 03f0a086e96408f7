"""Container lifecycle: limits, networking, removal on every path, a dead container, teardown time."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import statistics
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tackroom import ConfigError, SandboxError, SandboxSpec, SandboxTimeoutError
from tackroom_docker import DockerProvider
from tackroom_docker.engine import DockerEngineError

pytestmark = pytest.mark.docker


def new_spec(**kw) -> SandboxSpec:
    return SandboxSpec(name=f"life-{uuid.uuid4().hex[:8]}", **kw)


async def test_limits_labels_network_and_keeper_are_applied(provider, inspect):
    spec = new_spec(cpus=0.5, memory_mb=256, labels={"team": "rl"})
    async with provider.create(spec) as sandbox:
        name = sandbox.name
        assert inspect(name, "{{.HostConfig.NanoCpus}}") == "500000000"
        assert inspect(name, "{{.HostConfig.Memory}}") == str(256 * 1024 * 1024)
        assert inspect(name, "{{.HostConfig.MemorySwap}}") == str(256 * 1024 * 1024), "swap must not extend the limit"
        assert inspect(name, "{{.HostConfig.PidsLimit}}") == "1024"
        assert inspect(name, "{{json .HostConfig.SecurityOpt}}") == '["no-new-privileges"]'
        dropped = {c.removeprefix("CAP_") for c in json.loads(inspect(name, "{{json .HostConfig.CapDrop}}"))}
        assert dropped == {"NET_RAW", "MKNOD", "AUDIT_WRITE", "SETFCAP"}
        assert inspect(name, "{{.HostConfig.NetworkMode}}") == "none"
        assert inspect(name, "{{.HostConfig.Init}}") in ("<nil>", "false"), "PID 1 is the keeper shell, not docker-init"
        assert inspect(name, "{{.Config.StopSignal}}") in ("KILL", "SIGKILL")
        assert inspect(name, '{{index .Config.Labels "tackroom.managed"}}') == "1"
        assert inspect(name, '{{index .Config.Labels "tackroom._trial"}}') == spec.name
        assert inspect(name, '{{index .Config.Labels "team"}}') == "rl"
        r = await sandbox.exec("cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
        assert r.stdout.strip() == str(256 * 1024 * 1024), "the memory limit must be visible inside the container"


async def test_more_cpus_than_the_engine_has_are_capped_with_a_note(provider, inspect):
    async with provider.create(new_spec(cpus=4096)) as sandbox:
        assert any("capped" in note for note in sandbox.notes)
        assert int(inspect(sandbox.name, "{{.HostConfig.NanoCpus}}")) <= 4096 * 10**9


async def test_stop_removes_the_container_quickly_and_teardown_never_waits_a_grace_period(provider, containers):
    times = []
    for _ in range(3):
        spec = new_spec()
        sandbox = provider.create(spec)
        await sandbox.start()
        await sandbox.exec("sleep 300 >/dev/null 2>&1 &")  # a busy container must not slow teardown
        started = time.monotonic()
        await sandbox.stop()
        times.append(time.monotonic() - started)
        assert containers(f"tackroom._trial={spec.name}") == []
    print(f"stop: median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms")
    assert max(times) < 1.5


async def test_plain_docker_stop_is_fast_too(provider):
    """The stop signal is SIGKILL (PID 1 takes no signal from inside), so an outside `docker stop` does not wait."""
    async with provider.create(new_spec()) as sandbox:
        started = time.monotonic()
        subprocess.run(["docker", "stop", "-t", "10", sandbox.name], check=True, capture_output=True, timeout=30)
        assert time.monotonic() - started < 3.0


async def test_a_timed_out_command_does_not_leak_the_container(provider, containers):
    spec = new_spec()
    sandbox = provider.create(spec)
    await sandbox.start()
    with pytest.raises(SandboxTimeoutError):
        await sandbox.exec("sleep 600", timeout=1)
    await sandbox.stop()
    assert containers(f"tackroom._trial={spec.name}") == []


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.15, 0.3])
async def test_a_cancelled_start_leaves_no_container(provider, containers, delay):
    spec = new_spec()
    sandbox = provider.create(spec)
    task = asyncio.ensure_future(sandbox.start())
    await asyncio.sleep(delay)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        # Cancelled mid-start: start() itself must have removed whatever it created, without stop().
        assert containers(f"tackroom._trial={spec.name}") == []
    else:
        await sandbox.stop()  # start finished before the cancel arrived
        assert containers(f"tackroom._trial={spec.name}") == []


async def test_a_start_timeout_leaves_no_container(provider, containers):
    spec = new_spec(start_timeout_sec=0.05)
    sandbox = provider.create(spec)
    with pytest.raises(SandboxTimeoutError, match="start_timeout_sec"):
        await sandbox.start()
    # no pause here: the start returns once `docker run` has said what it made and that is removed (a client killed
    # at the deadline left the engine creating a container after the removal, a leftover on a loaded machine)
    assert containers(f"tackroom._trial={spec.name}") == []


async def test_a_cancelled_exec_kills_the_command_and_stop_still_works(provider, containers):
    spec = new_spec()
    sandbox = provider.create(spec)
    await sandbox.start()
    task = asyncio.ensure_future(sandbox.exec("echo $$ > /tmp/pid; exec sleep 600"))
    # cancelled once the command runs: on a loaded machine `docker exec` can take longer than a fixed pause to start
    # it, and with no /tmp/pid the check below reads `test -d /proc/`, "alive" for ever
    for _ in range(300):
        if (await sandbox.exec("test -s /tmp/pid && echo started")).stdout.strip() == "started":
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("the command never started")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(30):
        r = await sandbox.exec("test -d /proc/$(cat /tmp/pid) && echo alive || echo gone")
        if r.stdout.strip() == "gone":
            break
        await asyncio.sleep(0.1)
    assert r.stdout.strip() == "gone"
    await sandbox.stop()
    assert containers(f"tackroom._trial={spec.name}") == []


@pytest.mark.parametrize("how", ["kill", "rm"])
async def test_a_container_killed_mid_trial_gives_sandbox_errors(provider, containers, tmp_path, how):
    spec = new_spec()
    sandbox = provider.create(spec)
    await sandbox.start()
    assert (await sandbox.exec("echo alive")).stdout == "alive\n"
    cmd = ["docker", "kill", sandbox.name] if how == "kill" else ["docker", "rm", "-f", sandbox.name]
    subprocess.run(cmd, check=True, capture_output=True, timeout=30)
    with pytest.raises(SandboxError, match="not running|no longer exists") as caught:
        await sandbox.exec("echo alive")
    assert caught.value.error_class == "infra"
    local = tmp_path / "f.txt"
    local.write_text("x")
    with pytest.raises(SandboxError):
        await sandbox.upload(local, "/tmp/f.txt")
    with pytest.raises(SandboxError):
        await sandbox.read_file("/etc/hostname")
    await sandbox.stop()
    assert containers(f"tackroom._trial={spec.name}") == []


async def test_output_limit_is_an_option(base_image):
    provider = DockerProvider({"output_limit_bytes": 1000})
    async with provider.create(new_spec()) as sandbox:
        r = await sandbox.exec("head -c 5000 /dev/zero | tr '\\0' x")
        assert r.truncated and r.stdout == "x" * 1000


async def test_expose_needs_host_networking(provider):
    async with provider.create(new_spec()) as sandbox:
        with pytest.raises(ConfigError, match="network_mode"):
            await sandbox.expose(8000)


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
async def test_expose_returns_a_url_the_host_reaches_under_host_networking(provider, tmp_path):
    """Also proves RUN apt-get reaches Debian's mirror during builds (build_network = host)."""
    env = tmp_path / "environment"
    env.mkdir()
    (env / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\n"
        "RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends python3 >/dev/null\n"
    )
    spec = new_spec(environment_dir=env, allow_internet=True, build_timeout_sec=600)
    async with provider.create(spec) as sandbox:
        port = _free_port()
        await sandbox.write_file("/srv/www/index.html", "served from the sandbox\n")
        r = await sandbox.exec(f"cd /srv/www && nohup python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 &")
        assert r.ok, r.stderr
        url = await sandbox.expose(port)
        assert url == f"http://127.0.0.1:{port}"
        body = ""
        async with httpx.AsyncClient(timeout=2) as client:
            for _ in range(50):
                try:
                    body = (await client.get(f"{url}/index.html")).text
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
        assert body == "served from the sandbox\n"


async def test_a_missing_image_says_how_to_get_it(base_image):
    provider = DockerProvider({"default_image": "debian:no-such-tag-here", "pull": "never"})
    with pytest.raises(SandboxError, match="tackroom images bootstrap"):
        await provider.create(new_spec()).start()


async def test_an_unreachable_engine_says_how_to_start_dockerd(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-engine.sock'}")
    sandbox = DockerProvider().create(new_spec())
    with pytest.raises(DockerEngineError, match="dockerd") as caught:
        await sandbox.start()
    assert caught.value.error_class == "infra"


def test_a_missing_docker_cli_is_a_clear_error(tmp_path):
    sandbox = DockerProvider({"docker_binary": str(Path(tmp_path) / "no-docker")}).create(new_spec())
    with pytest.raises(DockerEngineError, match="not on PATH"):
        asyncio.run(sandbox.start())


async def test_a_remote_engine_is_refused_with_why(provider, monkeypatch, containers):
    """The root helpers enter the container from the host: an engine elsewhere (none can exist here, so its
    `docker info` answer is stood in for) is a ConfigError before anything is created."""
    real = await provider.cli.info()

    async def remote_info(**kw):
        return real.model_copy(update={"local": False})

    spec = new_spec()
    sandbox = provider.create(spec)
    monkeypatch.setattr(sandbox.cli, "info", remote_info)
    with pytest.raises(ConfigError, match="local engine"):
        await sandbox.start()
    await sandbox.stop()
    assert containers(f"tackroom._trial={spec.name}") == []
