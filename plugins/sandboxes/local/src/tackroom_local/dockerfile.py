"""A small Dockerfile reader: the instructions a non-Docker sandbox can honour (WORKDIR, COPY, ENV, RUN)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from pydantic import BaseModel

from tackroom import TaskError


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
