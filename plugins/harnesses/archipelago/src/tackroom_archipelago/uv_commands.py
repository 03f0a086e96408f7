"""``uv run`` commands in a Mercor ``mcp_config.json``, read as tackroom project servers.

Mercor's configs (and many MCP configs) start a server with uv, e.g. ``uv run --directory
/app/mcp_servers/mail python main.py`` or ``uv run server.py`` in the server's ``cwd``. tackroom already runs
such a server in its uv project's own environment (``[[servers]] project = ...``: the project's dependencies
installed for the sandbox's Python, see projects.py), so uv itself is not needed in the sandbox: the command
becomes the Python command uv would have run, and the project is found from ``--directory`` / ``--project`` /
the server's ``cwd``.

The policy: forgiving where the meaning is clear (options that only steer uv's own syncing, caching or output
are dropped, and so are ``--extra`` / ``--all-extras``: the project's site holds every extra; ``--python 3.13``
becomes the server's interpreter), strict where guessing would change what runs (``--with``, groups, an env file,
another index, a console script, ``uvx``, an option uv does not have): those are refused with the option named
and what to write instead.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from pydantic import BaseModel

IGNORED_FLAGS = frozenset({
    "-q", "--quiet", "-v", "--verbose", "--no-progress", "--offline", "--frozen", "--locked", "--no-sync",
    "--no-dev", "--isolated", "--native-tls", "--no-cache", "-n", "--no-config", "--no-python-downloads",
    "--compile-bytecode", "--exact", "--no-editable", "--no-env-file", "--all-extras",
})
"""Options that steer only how uv syncs, caches or prints: without uv in the sandbox they change nothing."""

IGNORED_WITH_VALUE = frozenset({"--cache-dir", "--color", "--extra"})
"""Options with a value that change nothing here (``--extra``: tackroom installs every extra of a project)."""

REFUSED = {
    "--with": "adds packages outside the project",
    "--with-editable": "adds packages outside the project",
    "--with-requirements": "adds packages outside the project",
    "--group": "installs a dependency group",
    "--only-group": "installs only a dependency group",
    "--all-groups": "installs the dependency groups",
    "--no-group": "leaves out a dependency group",
    "--env-file": "reads the server's environment from a file",
    "--index": "installs from another index",
    "--index-url": "installs from another index",
    "--extra-index-url": "installs from another index",
    "--default-index": "installs from another index",
    "--find-links": "installs from other links",
    "--no-project": "runs outside the project",
    "--script": "runs a PEP 723 script with its own inline dependencies",
    "--gui-script": "runs a script with its own inline dependencies",
    "--config-file": "reads uv settings from another file",
}
"""Options that change what is installed or run: tackroom cannot honour them faithfully, so it refuses."""

_PYTHON = re.compile(r"python(3(\.\d+)?)?")
_VERSION = re.compile(r"(?:python|cpython-?)?(3\.\d+)(\.\d+)?")


class UvCommandError(ValueError):
    """A ``uv`` command that cannot be read as a project server; the message says why."""


class UvRun(BaseModel):
    """What a ``uv run`` command means for a project server."""

    directory: str | None = None
    """``--directory``: where uv runs (the server's working directory, and where uv looks for the project)."""
    project: str | None = None
    """``--project``: the project folder, when given apart from the working directory."""
    python: str | None = None
    """``--python 3.13``: the interpreter name in the sandbox (``python3.13``)."""
    command: list[str]
    """What runs in the project's environment; starts with ``python``."""


def is_uv(command: str) -> bool:
    return PurePosixPath(command).name in ("uv", "uvx")


def _value(args: list[str], i: int, option: str) -> tuple[str, int]:
    arg = args[i]
    if arg.startswith(option + "="):
        return arg.split("=", 1)[1], i + 1
    if i + 1 >= len(args):
        raise UvCommandError(f"`{option}` has no value")
    return args[i + 1], i + 2


def _option_name(arg: str) -> str:
    return arg.split("=", 1)[0]


def parse_uv_run(command: str, args: list[str]) -> UvRun:
    """The project server that ``command args`` (a ``uv run ...`` command line) starts.

    Raises :class:`UvCommandError` for ``uvx`` / ``uv tool run``, a uv subcommand other than ``run``, an option
    in :data:`REFUSED` or unknown to uv, and a target that is not Python (a console script, another program)."""
    if PurePosixPath(command).name == "uvx":
        raise UvCommandError("`uvx` runs a published package in a throwaway environment, not a project of the "
                             "checkout")
    out: dict[str, str | None] = {"directory": None, "project": None, "python": None}
    module: str | None = None
    seen_run = False
    i = 0
    while i < len(args):
        arg = args[i]
        name = _option_name(arg)
        if not seen_run and not arg.startswith("-"):
            if arg != "run":
                what = "`uv tool run` runs a published package, not a project" if arg == "tool" else \
                    f"`uv {arg}` is not `uv run`"
                raise UvCommandError(what)
            seen_run = True
            i += 1
            continue
        if seen_run and not arg.startswith("-"):
            break  # the command uv runs
        if arg == "--":
            i += 1
            break
        if name in ("--directory", "--project"):
            value, i = _value(args, i, name)
            if ".." in PurePosixPath(value).parts:
                raise UvCommandError(f"`{name} {value}` climbs with '..'; refused")
            out[name.lstrip("-")] = value
        elif name in ("--python", "-p"):
            value, i = _value(args, i, name)
            version = _VERSION.fullmatch(value)
            if version is None:
                raise UvCommandError(f"`{name} {value}` is not a Python version tackroom can pick (3.X)")
            out["python"] = f"python{version.group(1)}"
        elif name in ("-m", "--module"):
            module, i = _value(args, i, name)
            break
        elif name in REFUSED:
            raise UvCommandError(f"`{name}` {REFUSED[name]}, which tackroom's project environment does not do")
        elif arg in IGNORED_FLAGS:
            i += 1
        elif name in IGNORED_WITH_VALUE:
            _, i = _value(args, i, name)
        else:
            raise UvCommandError(f"`{arg}` is not a uv option tackroom reads")
    if not seen_run:
        raise UvCommandError("`uv` without `run`")
    rest = args[i:]
    if module is not None:
        return UvRun(**out, command=["python", "-m", module, *rest])
    if not rest:
        raise UvCommandError("`uv run` names no command")
    target = rest[0]
    if _PYTHON.fullmatch(target):
        return UvRun(**out, command=["python", *rest[1:]])
    if target.endswith(".py"):
        return UvRun(**out, command=["python", *rest])
    raise UvCommandError(f"`uv run {target}` runs a console script or program ({target!r}), which tackroom does not "
                         "install (it installs the project's dependencies, not the project)")


__all__ = ["UvCommandError", "UvRun", "is_uv", "parse_uv_run"]
