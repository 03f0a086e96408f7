"""The task's Dockerfile on the local sandbox: a small reader of the instructions a non-Docker sandbox can honour
(WORKDIR, COPY, ENV, RUN) and :class:`DockerfileSteps`, which carries them out in the sandbox."""

from __future__ import annotations

import asyncio
import glob
import json
import os
import posixpath
import re
import shlex
from pathlib import Path

from pydantic import BaseModel

from tackroom import SandboxBuildError, SandboxPathError, TaskError


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


class DockerfileSteps:
    """The Dockerfile half of :class:`~tackroom_local.sandbox.LocalSandbox`: WORKDIR, COPY/ADD (of local files),
    ENV, ARG defaults and RUN, honoured as far as a shared /usr allows; FROM is not (the notes say so)."""

    async def _apply_dockerfile(self) -> None:
        if self.spec.image:
            self.notes.append(f"local sandbox: image {self.spec.image!r} is not used; the host's /usr is the userland")
        dockerfile = (self.spec.environment_dir / "Dockerfile") if self.spec.environment_dir else None
        if dockerfile is None or not dockerfile.is_file():
            return
        context = self.spec.environment_dir
        assert context is not None
        args: dict[str, str] = {}
        for ins in parse_dockerfile(dockerfile):
            where = f"{dockerfile}:{ins.line}"
            try:
                if ins.keyword == "FROM":
                    self.notes.append(f"local sandbox: 'FROM {ins.args}' is not honoured; the host's /usr is the userland")
                elif ins.keyword == "WORKDIR":
                    self.workdir = posixpath.join(self.workdir, ins.args.strip())
                    await asyncio.to_thread(self._ensure_dir, self.workdir)
                elif ins.keyword == "ENV":
                    self.env.update(parse_env(ins.args))
                elif ins.keyword == "ARG":
                    key, _, default = ins.args.partition("=")
                    if default:
                        args[key.strip()] = default.strip().strip('"')
                elif ins.keyword in ("COPY", "ADD"):
                    await self._copy_from_context(context, ins.args)
                elif ins.keyword == "RUN":
                    cmd = ins.json_or_shell() or ins.args
                    result = await self.exec(cmd, env=args, timeout=self.spec.build_timeout_sec)
                    if not result.ok:
                        raise SandboxBuildError(
                            f"{where}: RUN failed with exit {result.exit_code}: {(result.stderr or result.stdout)[-2000:]}",
                            task_fault=True,
                        )
                elif ins.keyword in ("CMD", "ENTRYPOINT", "EXPOSE", "LABEL", "MAINTAINER", "HEALTHCHECK", "STOPSIGNAL"):
                    continue
                else:
                    self.notes.append(f"local sandbox: {ins.keyword} at {where} is ignored")
            except (ValueError, SandboxPathError) as exc:
                raise SandboxBuildError(f"{where}: {ins.keyword} {ins.args}: {exc}", task_fault=True) from exc

    async def _copy_from_context(self, context: Path, args: str) -> None:
        sources, dest = parse_copy(args)
        dest_abs = posixpath.join(self.workdir, dest)
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
                    await self.upload(src, dest_abs, timeout=self.spec.build_timeout_sec)
                else:
                    into_dir = dest.endswith("/") or many or await asyncio.to_thread(self._is_dir, dest_abs)
                    target = posixpath.join(dest_abs, src.name) if into_dir else dest_abs
                    await self.upload(src, target, timeout=self.spec.build_timeout_sec)
