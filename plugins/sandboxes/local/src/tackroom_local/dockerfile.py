"""The task's Dockerfile on the local sandbox: a small reader of the instructions a non-Docker sandbox can honour
(WORKDIR, COPY, ENV, RUN) and :class:`DockerfileSteps`, which carries them out in a started sandbox."""

from __future__ import annotations

import asyncio
import glob
import json
import os
import posixpath
import re
import shlex
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel

from tackroom import ExecResult, SandboxBuildError, SandboxPathError, SandboxSpec, TaskError
from tackroom_local.transfers import ViewTransfers


class Instruction(BaseModel):
    keyword: str
    args: str
    line: int

    def json_or_shell(self) -> list[str] | None:
        """Exec-form arguments (``["a", "b"]``) or ``None`` for the shell form."""
        text = self.args.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                return None
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return value
        return None


def parse_dockerfile(path: Path) -> list[Instruction]:
    """Split a Dockerfile into instructions (continuations joined, comments dropped)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TaskError(f"{path}: cannot read Dockerfile: {exc}") from exc
    out: list[Instruction] = []
    buf, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue
        if not buf:
            start = number
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        keyword, _, args = buf.partition(" ")
        out.append(Instruction(keyword=keyword.upper(), args=args.strip(), line=start))
        buf = ""
    if buf:
        raise TaskError(f"{path}:{start}: instruction ends with a line continuation")
    return out


def parse_env(args: str) -> dict[str, str]:
    """``ENV A=1 B="two words"`` or the legacy ``ENV A some value``."""
    if "=" not in args.split(" ", 1)[0]:
        key, _, value = args.partition(" ")
        return {key: value.strip()}
    result = {}
    for token in shlex.split(args):
        key, sep, value = token.partition("=")
        if not sep:
            raise ValueError(f"ENV token {token!r} has no '='")
        result[key] = value
    return result


def parse_copy(args: str) -> tuple[list[str], str]:
    """Sources and destination of ``COPY``/``ADD`` (flags such as ``--chown`` dropped)."""
    tokens = [t for t in shlex.split(args) if not re.match(r"^--[a-z-]+(=.*)?$", t)]
    if args.strip().startswith("["):
        tokens = json.loads(args)
    if len(tokens) < 2:
        raise ValueError("COPY needs at least one source and a destination")
    return tokens[:-1], tokens[-1]


class BuildTarget(Protocol):
    """What :class:`DockerfileSteps` works through: a sandbox's public face (the local sandbox is one)."""

    spec: SandboxSpec
    notes: list[str]
    env: dict[str, str]
    workdir: str

    async def exec(self, cmd: list[str] | str, *, env: dict[str, str] | None = ..., timeout: float = ...) -> ExecResult: ...

    async def upload(self, source: Path, dest: str, *, timeout: float = ...) -> None: ...


class DockerfileSteps:
    """The task's Dockerfile in a started sandbox: WORKDIR, COPY/ADD (of local files), ENV, ARG defaults and RUN,
    honoured as far as a shared /usr allows; FROM is not (the notes say so). It works through the sandbox's public
    ``exec``, ``upload``, ``env`` and ``workdir``, and asks ``transfers`` where a folder is or must be."""

    def __init__(self, sandbox: BuildTarget, transfers: ViewTransfers) -> None:
        self.sandbox, self.transfers = sandbox, transfers

    async def apply(self) -> None:
        sb = self.sandbox
        if sb.spec.image:
            sb.notes.append(f"local sandbox: image {sb.spec.image!r} is not used; the host's /usr is the userland")
        dockerfile = (sb.spec.environment_dir / "Dockerfile") if sb.spec.environment_dir else None
        if dockerfile is None or not dockerfile.is_file():
            return
        context = sb.spec.environment_dir
        assert context is not None
        args: dict[str, str] = {}
        for ins in parse_dockerfile(dockerfile):
            where = f"{dockerfile}:{ins.line}"
            try:
                if ins.keyword == "FROM":
                    sb.notes.append(f"local sandbox: 'FROM {ins.args}' is not honoured; the host's /usr is the userland")
                elif ins.keyword == "WORKDIR":
                    sb.workdir = posixpath.join(sb.workdir, ins.args.strip())
                    await asyncio.to_thread(self.transfers.ensure_dir, sb.workdir, sb.workdir)
                elif ins.keyword == "ENV":
                    sb.env.update(parse_env(ins.args))
                elif ins.keyword == "ARG":
                    key, _, default = ins.args.partition("=")
                    if default:
                        args[key.strip()] = default.strip().strip('"')
                elif ins.keyword in ("COPY", "ADD"):
                    await self._copy_from_context(context, ins.args)
                elif ins.keyword == "RUN":
                    cmd = ins.json_or_shell() or ins.args
                    result = await sb.exec(cmd, env=args, timeout=sb.spec.build_timeout_sec)
                    if not result.ok:
                        raise SandboxBuildError(
                            f"{where}: RUN failed with exit {result.exit_code}: {(result.stderr or result.stdout)[-2000:]}",
                            task_fault=True,
                        )
                elif ins.keyword in ("CMD", "ENTRYPOINT", "EXPOSE", "LABEL", "MAINTAINER", "HEALTHCHECK", "STOPSIGNAL"):
                    continue
                else:
                    sb.notes.append(f"local sandbox: {ins.keyword} at {where} is ignored")
            except (ValueError, SandboxPathError) as exc:
                raise SandboxBuildError(f"{where}: {ins.keyword} {ins.args}: {exc}", task_fault=True) from exc

    async def _copy_from_context(self, context: Path, args: str) -> None:
        sb = self.sandbox
        sources, dest = parse_copy(args)
        dest_abs = posixpath.join(sb.workdir, dest)
        many = len(sources) > 1 or any(glob.has_magic(s) for s in sources)
        for source in sources:
            matches = sorted(glob.glob(str(context / source))) if glob.has_magic(source) else [str(context / source)]
            if not matches or not all(os.path.exists(m) for m in matches):
                raise TaskError(f"COPY source {source!r} not found in {context}")
            for match in matches:
                src = Path(match)
                if not src.resolve().is_relative_to(context.resolve()):
                    raise SandboxPathError(f"COPY source {source!r} is outside the build context")
                if src.is_dir():
                    await sb.upload(src, dest_abs, timeout=sb.spec.build_timeout_sec)
                else:
                    into_dir = dest.endswith("/") or many or await asyncio.to_thread(self.transfers.is_dir, dest_abs, sb.workdir)
                    target = posixpath.join(dest_abs, src.name) if into_dir else dest_abs
                    await sb.upload(src, target, timeout=sb.spec.build_timeout_sec)
