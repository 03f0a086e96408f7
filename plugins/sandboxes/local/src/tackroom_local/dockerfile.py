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
from collections.abc import Mapping
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


_VARIABLE = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?::(?P<op>[-+])(?P<word>[^}]*))?\}"
                       r"|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))")
"""``$NAME``, ``${NAME}``, ``${NAME:-default}`` and ``${NAME:+alternative}``: Docker's substitutions."""


def _take(text: str, i: int, variables: Mapping[str, str], out: list[str], *, quoted: bool) -> int:
    """Append what ``text[i]`` stands for to ``out`` (a character, an escaped one, a variable's value); return where
    the next one starts. In double quotes a backslash escapes only ``"``, ``\\`` and ``$``."""
    c = text[i]
    if c == "\\" and i + 1 < len(text) and (not quoted or text[i + 1] in '"\\$'):
        out.append(text[i + 1])
        return i + 2
    if c == "$" and (m := _VARIABLE.match(text, i)):
        value = variables.get(m["braced"] or m["plain"], "")
        if m["op"] == "-":
            value = value or m["word"]
        elif m["op"] == "+":
            value = m["word"] if value else ""
        out.append(value)
        return m.end()
    out.append(c)
    return i + 1


def substitute(text: str, variables: Mapping[str, str]) -> str:
    """``text`` with Docker's variable substitutions made from ``variables`` (an unset name is empty, ``\\$`` a literal
    ``$``), as Docker makes them in ENV and WORKDIR: ``ENV PATH=/opt/venv/bin:$PATH`` extends the PATH."""
    out: list[str] = []
    i = 0
    while i < len(text):
        i = _take(text, i, variables, out, quoted=False)
    return "".join(out)


def env_words(args: str, variables: Mapping[str, str]) -> list[str]:
    """ENV's arguments split as Docker splits them: whitespace outside quotes separates words; single quotes keep
    their text as it is; double quotes and bare text have their variables substituted; a backslash escapes."""
    words: list[str] = []
    word: list[str] | None = None
    i = 0
    while i < len(args):
        c = args[i]
        if c.isspace():
            if word is not None:
                words.append("".join(word))
            word, i = None, i + 1
            continue
        word = [] if word is None else word
        if c == "'":
            end = args.find("'", i + 1)
            if end < 0:
                raise ValueError("a single quote is not closed")
            word.append(args[i + 1 : end])
            i = end + 1
        elif c == '"':
            i += 1
            while i < len(args) and args[i] != '"':
                i = _take(args, i, variables, word, quoted=True)
            if i >= len(args):
                raise ValueError("a double quote is not closed")
            i += 1
        else:
            i = _take(args, i, variables, word, quoted=False)
    if word is not None:
        words.append("".join(word))
    return words


def parse_env(args: str, variables: Mapping[str, str] | None = None) -> dict[str, str]:
    """``ENV A=1 B="two words"`` or the legacy ``ENV A some value``; ``$NAME`` in a value is substituted from
    ``variables`` (what was set before this line), as Docker does."""
    variables = variables or {}
    if "=" not in args.split(" ", 1)[0]:
        key, _, value = args.partition(" ")
        return {key: substitute(value.strip(), variables)}
    result = {}
    for token in env_words(args, variables):
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

    async def apply(self) -> bool:
        """Carry out the task's Dockerfile; False when the task has none."""
        sb = self.sandbox
        if sb.spec.image:
            sb.notes.append(f"local sandbox: image {sb.spec.image!r} is not used; the host's /usr is the userland")
        dockerfile = (sb.spec.environment_dir / "Dockerfile") if sb.spec.environment_dir else None
        if dockerfile is None or not dockerfile.is_file():
            return False
        context = sb.spec.environment_dir
        assert context is not None
        args: dict[str, str] = {}
        for ins in parse_dockerfile(dockerfile):
            where = f"{dockerfile}:{ins.line}"
            try:
                if ins.keyword == "FROM":
                    sb.notes.append(f"local sandbox: 'FROM {ins.args}' is not honoured; the host's /usr is the userland")
                elif ins.keyword == "WORKDIR":
                    sb.workdir = posixpath.join(sb.workdir, substitute(ins.args.strip(), {**args, **sb.env}))
                    await asyncio.to_thread(self.transfers.ensure_dir, sb.workdir, sb.workdir)
                elif ins.keyword == "ENV":
                    sb.env.update(parse_env(ins.args, {**args, **sb.env}))
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
        return True

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
