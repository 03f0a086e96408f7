"""Task images built from environment/: Dockerfile semantics, the content-hash cache, build failures."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tackroom import SandboxBuildError, SandboxSpec
from tackroom_docker.images import environment_hash

pytestmark = pytest.mark.docker

DOCKERFILE = """\
FROM debian:bookworm-slim
ENV GREETING="hello from the build"
WORKDIR /srv/task
COPY data.txt ./data.txt
COPY scripts/ /opt/scripts/
RUN chmod +x /opt/scripts/run.sh && echo built > /srv/task/built.txt
"""


@pytest.fixture(autouse=True)
def _drop_images_built_here():
    """Unique test environments would pile up as tags; remove the ones this test built."""
    before = set(_env_images())
    yield
    made = set(_env_images()) - before
    if made:
        subprocess.run(["docker", "image", "rm", *made], capture_output=True, timeout=120)


def _env_images() -> list[str]:
    out = subprocess.run(["docker", "images", "tackroom-env", "--format", "{{.Repository}}:{{.Tag}}"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    return out.stdout.split()


def make_env(root: Path, dockerfile: str = DOCKERFILE) -> Path:
    env = root / "environment"
    (env / "scripts").mkdir(parents=True)
    (env / "Dockerfile").write_text(dockerfile)
    # A unique file so the first build in this test really builds.
    (env / "data.txt").write_text(f"data {uuid.uuid4().hex}\n")
    (env / "scripts" / "run.sh").write_text('#!/bin/sh\necho "script says $GREETING"\n')
    return env


async def test_dockerfile_copy_env_workdir_are_honoured_and_second_start_hits_the_cache(provider, tmp_path):
    env = make_env(tmp_path)
    first = provider.create(SandboxSpec(name=f"build-{uuid.uuid4().hex[:6]}", environment_dir=env))
    try:
        await first.start()
        assert first.image is not None and first.image.how == "built"
        r = await first.exec("pwd; cat data.txt built.txt; echo $GREETING; /opt/scripts/run.sh", timeout=30)
        lines = r.stdout.splitlines()
        assert lines[0] == "/srv/task", "the Dockerfile's WORKDIR must be the default cwd"
        assert lines[1].startswith("data ") and lines[2] == "built"
        assert lines[3] == "hello from the build" and lines[4] == "script says hello from the build"
    finally:
        await first.stop()

    second = provider.create(SandboxSpec(name=f"build-{uuid.uuid4().hex[:6]}", environment_dir=env))
    try:
        started = time.monotonic()
        await second.start()
        assert second.image is not None and second.image.how == "cached"
        assert second.image.ref == first.image.ref
        print(f"build-cache hit: image step {second.timings['image_s'] * 1000:.0f} ms, whole start {time.monotonic() - started:.2f} s")
        assert second.timings["image_s"] < 1.0
    finally:
        await second.stop()


def test_the_cache_key_follows_content_and_executable_bit(tmp_path):
    env = make_env(tmp_path)
    before = environment_hash(env)
    assert environment_hash(env) == before
    (env / "scripts" / "run.sh").chmod(0o755)
    after_chmod = environment_hash(env)
    assert after_chmod != before
    (env / "data.txt").write_text("changed\n")
    assert environment_hash(env) not in (before, after_chmod)


@pytest.mark.parametrize(
    "step",
    ["RUN echo failing on purpose && exit 3", "COPY no-such-file.txt /app/", "FROMAGE debian:bookworm-slim"],
    ids=["run-fails", "copy-missing", "bad-instruction"],
)
async def test_a_dockerfile_that_does_not_build_is_a_task_error(provider, tmp_path, step, containers):
    env = make_env(tmp_path, f"FROM debian:bookworm-slim\n{step}\n")
    spec = SandboxSpec(name=f"broken-{uuid.uuid4().hex[:6]}", environment_dir=env)
    sandbox = provider.create(spec)
    with pytest.raises(SandboxBuildError) as caught:
        await sandbox.start()
    await sandbox.stop()
    assert caught.value.error_class == "task", str(caught.value)
    assert "Dockerfile does not build" in str(caught.value)
    assert containers(f"tackroom._trial={spec.name}") == []


async def test_a_missing_base_image_is_an_infra_error_with_the_fix(provider, tmp_path):
    env = make_env(tmp_path, "FROM tackroom-no-such-base:1\nRUN true\n")
    sandbox = provider.create(SandboxSpec(name=f"nobase-{uuid.uuid4().hex[:6]}", environment_dir=env))
    with pytest.raises(SandboxBuildError) as caught:
        await sandbox.start()
    assert caught.value.error_class == "infra"
    assert "tackroom-no-such-base:1" in str(caught.value) and "docker load" in str(caught.value)


async def test_build_timeout_is_a_timeout_error(provider, tmp_path):
    env = make_env(tmp_path, "FROM debian:bookworm-slim\nRUN sleep 60\n")
    sandbox = provider.create(SandboxSpec(name=f"slow-{uuid.uuid4().hex[:6]}", environment_dir=env, build_timeout_sec=2))
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="build_timeout_sec"):
        await sandbox.start()
    assert time.monotonic() - started < 10


async def test_keep_entrypoint_runs_the_images_entrypoint(base_image, tmp_path):
    from tackroom_docker import DockerProvider

    env = make_env(
        tmp_path,
        "FROM debian:bookworm-slim\n"
        "RUN printf '#!/bin/sh\\necho ran > /tmp/entrypoint-ran\\nexec \"$@\"\\n' > /entry.sh && chmod +x /entry.sh\n"
        'ENTRYPOINT ["/entry.sh"]\n',
    )
    spec = SandboxSpec(name=f"entry-{uuid.uuid4().hex[:6]}", environment_dir=env)
    async with DockerProvider({"keep_entrypoint": True}).create(spec) as sandbox:
        assert (await sandbox.exec("cat /tmp/entrypoint-ran")).stdout == "ran\n"
    async with DockerProvider().create(spec.model_copy(update={"name": spec.name + "-b"})) as sandbox:
        assert (await sandbox.exec("test -e /tmp/entrypoint-ran")).exit_code == 1, "the entrypoint is replaced by default"


async def test_an_image_without_bash_runs_string_commands_under_sh(provider, tmp_path):
    env = make_env(tmp_path, "FROM debian:bookworm-slim\nRUN rm -f /bin/bash /usr/bin/bash\n")
    async with provider.create(SandboxSpec(name=f"nobash-{uuid.uuid4().hex[:6]}", environment_dir=env)) as sandbox:
        r = await sandbox.exec("echo $((40 + 2)) from sh")
        assert r.stdout == "42 from sh\n", r
        assert any("no bash" in note for note in sandbox.notes)


def _marked_environment(tmp_path: Path) -> Path:
    env = tmp_path / f"environment-{uuid.uuid4().hex[:6]}"
    env.mkdir()
    (env / "Dockerfile").write_text(f"FROM debian:bookworm-slim\nRUN echo {env.name} > /built-from-dockerfile\n")
    return env


@pytest.mark.parametrize("pull", ["missing", "never"])
async def test_an_image_that_cannot_be_pulled_is_built_from_the_dockerfile_with_a_note(base_image, tmp_path, pull):
    from tackroom_docker import DockerProvider

    env = _marked_environment(tmp_path)
    missing = f"registry.invalid/tackroom-test/absent-{uuid.uuid4().hex[:6]}:1"
    sb = DockerProvider({"pull": pull, "pull_timeout_sec": 60}).create(
        SandboxSpec(name=f"build-{uuid.uuid4().hex[:8]}", image=missing, environment_dir=env))
    async with sb:
        assert (await sb.exec("cat /built-from-dockerfile")).stdout.strip() == env.name
    assert any(missing in n and "built" in n and "Dockerfile" in n for n in sb.notes), sb.notes


async def test_an_image_that_cannot_be_pulled_without_a_dockerfile_is_still_an_error(provider, tmp_path):
    from tackroom import SandboxError

    sb = provider.create(SandboxSpec(name=f"build-{uuid.uuid4().hex[:8]}", image="registry.invalid/absent:1"))
    with pytest.raises(SandboxError, match="could not be pulled"):
        await sb.start()
    await sb.stop()


async def test_force_build_builds_the_dockerfile_although_the_image_is_present(provider, tmp_path):
    env = _marked_environment(tmp_path)
    spec = SandboxSpec(name=f"build-{uuid.uuid4().hex[:8]}", image="debian:bookworm-slim", environment_dir=env,
                       force_build=True)
    async with provider.create(spec) as sb:
        assert (await sb.exec("cat /built-from-dockerfile")).stdout.strip() == env.name
        assert sb.image.how == "built" and any("force_build" in n for n in sb.notes)
    async with provider.create(spec.model_copy(update={"force_build": False, "name": f"b-{uuid.uuid4().hex[:6]}"})) as sb:
        assert not (await sb.exec("test -e /built-from-dockerfile")).ok, "without force_build the named image runs"
