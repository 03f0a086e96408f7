"""Getting the image a sandbox runs: a task's Dockerfile built once per content hash, or a named image."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import weakref
from pathlib import Path
from typing import Any

from tackroom import SandboxBuildError, SandboxError, SandboxSpec, SandboxTimeoutError
from tackroom_docker.engine import DockerCLI, DockerEngineError
from tackroom_docker.options import DockerOptions

ENV_REPOSITORY = "tackroom-env"
HASH_VERSION = b"tackroom-docker-env-v1\n"

# Lines `docker build` prints when the Dockerfile itself is at fault (legacy builder and BuildKit).
TASK_FAULT_PATTERNS = re.compile(
    r"returned a non-zero code|did not complete successfully|dockerfile parse error|unknown instruction|"
    r"COPY failed|ADD failed|failed to compute cache key|failed to process .*: unexpected|"
    r"Dockerfile cannot be empty|no build stage in current context|failed to parse|"
    r"when using COPY with more than one source file|not found: not found",
    re.IGNORECASE,
)
MISSING_BASE_PATTERNS = re.compile(
    r"pull access denied|failed to resolve source metadata|manifest unknown|no such host|"
    r"dial tcp|repository does not exist|failed to do request|connection refused",
    re.IGNORECASE,
)


def environment_hash(directory: Path) -> str:
    """SHA-256 over every file's relative path, type, executable bit and content (symlinks by target)."""
    digest = hashlib.sha256(HASH_VERSION)
    for path in sorted(directory.rglob("*"), key=lambda p: p.relative_to(directory).as_posix()):
        rel = path.relative_to(directory).as_posix().encode()
        if path.is_symlink():
            digest.update(b"L\0" + rel + b"\0" + os.readlink(path).encode() + b"\0")
        elif path.is_dir():
            digest.update(b"D\0" + rel + b"\0")
        elif path.is_file():
            executable = b"x" if os.access(path, os.X_OK) else b"-"
            digest.update(b"F\0" + rel + b"\0" + executable + b"\0")
            with path.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
            digest.update(b"\0")
    return digest.hexdigest()


def environment_tag(directory: Path) -> str:
    return f"{ENV_REPOSITORY}:{environment_hash(directory)[:32]}"


# One build per tag at a time within a process (per event loop: asyncio locks bind to one).
_build_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = weakref.WeakKeyDictionary()


def _lock_for(tag: str) -> asyncio.Lock:
    locks = _build_locks.setdefault(asyncio.get_running_loop(), {})
    return locks.setdefault(tag, asyncio.Lock())


class ResolvedImage:
    """The image a container will run, with its inspect record and how it was obtained."""

    def __init__(self, ref: str, record: dict[str, Any], how: str) -> None:
        self.ref = ref
        self.record = record
        self.how = how
        """``built``, ``cached`` (build-cache hit), ``local`` or ``pulled``."""
        self.note = ""
        """Why the image is not the one the task named (built from its Dockerfile instead), for the trial's notes."""

    @property
    def working_dir(self) -> str:
        return (self.record.get("Config") or {}).get("WorkingDir") or ""


class ImageResolver:
    """Turns a :class:`SandboxSpec` into a local image, building or pulling at most once."""

    def __init__(self, cli: DockerCLI, options: DockerOptions) -> None:
        self.cli = cli
        self.options = options

    async def resolve(self, spec: SandboxSpec) -> ResolvedImage:
        """The task's ``image`` (pulled if missing), else its Dockerfile built, else ``default_image``. With a
        Dockerfile present, ``spec.force_build`` builds it even when ``image`` is set, and an ``image`` that is
        neither present nor pullable is built from it instead (as Harbor does), with a note."""
        directory = spec.environment_dir
        has_dockerfile = directory is not None and (directory / "Dockerfile").is_file()
        if spec.image and not (spec.force_build and has_dockerfile):
            try:
                return await self.named(spec.image)
            except DockerEngineError:
                raise
            except SandboxError as exc:
                if not has_dockerfile:
                    raise
                built = await self.build(directory, timeout=spec.build_timeout_sec)  # type: ignore[arg-type]
                built.note = (f"image {spec.image} is not present and could not be pulled ({str(exc).split('. ')[0]}); "
                              f"built {directory}/Dockerfile instead")
                return built
        if has_dockerfile:
            built = await self.build(directory, timeout=spec.build_timeout_sec)  # type: ignore[arg-type]
            if spec.image:
                built.note = f"force_build: built {directory}/Dockerfile instead of using image {spec.image}"
            return built
        return await self.named(self.options.default_image)

    async def named(self, ref: str) -> ResolvedImage:
        record = await self.cli.image_exists(ref, timeout=self.options.cli_timeout_sec)
        if record is not None:
            return ResolvedImage(ref, record, "local")
        if self.options.pull == "never":
            raise SandboxError(f"image {ref!r} is not present locally and pull = 'never'. {_image_hint(ref)}")
        pulled = await self.cli.run(["pull", "--quiet", ref], timeout=self.options.pull_timeout_sec)
        if not pulled.ok:
            raise SandboxError(f"image {ref!r} is not present locally and could not be pulled: {pulled.err}. {_image_hint(ref)}")
        record = await self.cli.image_exists(ref, timeout=self.options.cli_timeout_sec)
        if record is None:
            raise SandboxError(f"image {ref!r} was pulled but `docker image inspect` does not find it")
        return ResolvedImage(ref, record, "pulled")

    async def build(self, directory: Path, *, timeout: float) -> ResolvedImage:
        """Build ``directory`` (its Dockerfile) unless an image with its content hash exists."""
        tag = await asyncio.to_thread(environment_tag, directory)
        async with _lock_for(tag):
            record = await self.cli.image_exists(tag, timeout=self.options.cli_timeout_sec)
            if record is not None:
                return ResolvedImage(tag, record, "cached")
            args = ["build", "--force-rm", "--label", "tackroom.managed=1", "--label", f"tackroom.env-dir={directory.name}"]
            if self.options.build_network != "default":
                args += ["--network", self.options.build_network]
            args += ["-t", tag, "-f", str(directory / "Dockerfile"), str(directory)]
            try:
                result = await self.cli.run(args, timeout=timeout, output_limit=4_000_000)
            except SandboxTimeoutError as exc:
                raise SandboxTimeoutError(
                    f"building {directory} took longer than {timeout:g}s ([environment].build_timeout_sec); "
                    "raise it in task.toml or make the Dockerfile lighter"
                ) from exc
            if not result.ok:
                raise _build_error(directory, result.out + "\n" + result.err)
            record = await self.cli.image_exists(tag, timeout=self.options.cli_timeout_sec)
            if record is None:
                raise SandboxError(f"`docker build` of {directory} succeeded but {tag} is not there")
            return ResolvedImage(tag, record, "built")


def _build_error(directory: Path, log: str) -> SandboxBuildError:
    tail = "\n".join(line for line in log.strip().splitlines()[-25:] if "DEPRECATED" not in line)
    if TASK_FAULT_PATTERNS.search(log):
        # A step of the Dockerfile failed (RUN, COPY, syntax): the task is broken, retrying will not help.
        return SandboxBuildError(f"the task's Dockerfile does not build ({directory / 'Dockerfile'}):\n{tail}", task_fault=True)
    if MISSING_BASE_PATTERNS.search(log):
        base = _from_line(directory)
        return SandboxBuildError(
            f"building {directory / 'Dockerfile'} failed: its base image {base or ''} is not available locally and "
            f"no registry answered. {_image_hint(base or '')}\n{tail}"
        )
    return SandboxBuildError(f"`docker build` of {directory} failed:\n{tail}")


def _from_line(directory: Path) -> str | None:
    try:
        for line in (directory / "Dockerfile").read_text(errors="replace").splitlines():
            parts = line.strip().split()
            if len(parts) >= 2 and parts[0].upper() == "FROM":
                return next((p for p in parts[1:] if not p.startswith("--")), None)
    except OSError:
        return None
    return None


def _image_hint(ref: str) -> str:
    if ref.startswith("debian:"):
        return "Build it offline from Debian's packages with `tackroom images bootstrap`"
    return "Load it with `docker load -i <archive>` or make a registry reachable"
