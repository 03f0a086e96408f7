"""Importing Mercor's task packaging (``tackroom archipelago import-mercor SRC DEST``).

A Mercor task folder holds ``initial_messages.json`` (the system and user messages), ``mcp_config.json``
(stdio servers, each run from ``<checkout>/mcp_servers/<server>``), ``verifiers.json`` (rubric criteria
graded on the snapshot diff), ``agent_config.json`` and a world snapshot (``original_snapshot.zip`` or
``.tar.gz``). Each becomes a tackroom world task::

    DEST/<task>/task.toml       [world] (path, system_prompt), [environment] docker_image, [[rubric]],
                                [rubric_judge] (the snapshot folder and its baseline)
    DEST/<task>/instruction.md  the user message
    DEST/<task>/world/          world.toml (one project server per mcp_config entry) and files/ (the snapshot)
    DEST/<task>/mercor/         the original JSON files, for reference
    DEST/run.toml               archipelago + docker + rubric-judge, max_steps from agent_config.json

The snapshot's ``filesystem/`` lands at ``/filesystem`` (where Mercor's filesystem server looks) and its
``.apps_data/`` at ``/filesystem/.apps_data``: ``APP_APPS_DATA_ROOT`` for every server, and an env value under
``/.apps_data`` (``APP_MAIL_DATA_ROOT=/.apps_data/mail``) is moved there, so the apps' state is graded too. The servers'
checkout is ``--checkout``, else ``$TACKROOM_MERCOR_ARCHIPELAGO``, else the nearest folder above SRC with
``mcp_servers/``; world.toml keeps ``${TACKROOM_MERCOR_ARCHIPELAGO:-<that path>}`` so it can move. A server
started with ``uv run`` (``uv run --directory D python -m server``, ``uv run server.py``) becomes the command uv
would run, in the project's own environment; one that cannot be read so is refused (uv_commands.py).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import tempfile
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tackroom_archipelago.errors import MercorImportError
from tackroom_archipelago.snapshot_archive import SnapshotLimits, unpack_snapshot
from tackroom_archipelago.uv_commands import UvCommandError, is_uv, parse_uv_run

CHECKOUT_ENV = "TACKROOM_MERCOR_ARCHIPELAGO"
MOUNT = "/filesystem"
APPS_DATA = f"{MOUNT}/.apps_data"
"""Where the snapshot's ``.apps_data/`` lands (Mercor's servers look in ``/.apps_data``; their env is moved here)."""
IMAGE = "python:3.13-slim-bookworm"
SNAPSHOT_NAMES = ("original_snapshot.zip", "original_snapshot.tar.gz", "original_snapshot.tgz", "original_snapshot.tar")
EXEC_OUTPUT_LIMIT = 12_000_000
"""run.toml's docker ``output_limit_bytes``: under ``--network none`` the harness reaches the servers through
``Sandbox.exec``, whose answer is the MCP JSON (an image in base64) in base64 again, so a 5 MB picture needs about
8.9 MB; docker's default cap (1 MB) would refuse any picture over about 550 KB."""
COPIED = ("initial_messages.json", "mcp_config.json", "verifiers.json", "agent_config.json", "eval_configs.json",
          "grading_settings.json", "scoring_config.json", "orchestrator_config.json")


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class InitialMessage(_Loose):
    role: Literal["system", "user", "assistant"]
    content: str | list[dict[str, Any]]

    def text(self, where: str) -> str:
        if isinstance(self.content, str):
            return self.content
        parts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise MercorImportError(f"{where}: a {self.role} message has a {part.get('type')!r} part; only text "
                                        "parts can be imported")
            parts.append(part["text"])
        return "\n\n".join(parts)


class McpServerEntry(_Loose):
    transport: str = "stdio"
    command: str
    args: list[str] = Field(default_factory=list)
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)


class McpConfig(_Loose):
    mcpServers: dict[str, McpServerEntry] = Field(min_length=1)  # Mercor's key


class VerifierValues(_Loose):
    criteria: str = Field(min_length=1)
    is_primary_objective: bool = True


class MercorVerifier(_Loose):
    verifier_id: str
    eval_config_id: str | None = None
    verifier_values: VerifierValues
    verifier_index: int = 0


class AgentConfigValues(_Loose):
    max_steps: int | None = Field(default=None, ge=1)
    timeout: float | None = Field(default=None, gt=0)


class AgentConfig(_Loose):
    agent_config_values: AgentConfigValues = Field(default_factory=AgentConfigValues)


class ImportedTask(BaseModel):
    """What one import wrote."""

    name: str
    path: Path
    servers: dict[str, str]
    """tackroom server name -> the Mercor server folder it runs."""
    criteria: int
    files: int
    max_steps: int | None = None


MAX_JSON_BYTES = 64 << 20
"""A task's JSON files are configuration: one larger than this is refused rather than read."""


def _regular_file(path: Path) -> bool:
    """Whether ``path`` is a regular file in its own right; a link is refused by name (:func:`_no_link`)."""
    _no_link(path)
    return path.is_file()


def _no_link(path: Path) -> None:
    """A task folder comes from whoever wrote it: a link in it would copy a host file into the task (and from there
    into every sandbox of its trials), so none is followed."""
    if path.is_symlink():
        raise MercorImportError(f"{path}: a symbolic link (to {os.readlink(path)}); a task folder's files must be "
                                "regular files inside it, nothing is read through a link")


def _read_json(path: Path, model: Any) -> Any:
    if not _regular_file(path):
        raise MercorImportError(f"{path}: missing; a Mercor task folder has initial_messages.json, mcp_config.json "
                                "and verifiers.json beside its snapshot")
    if path.stat().st_size > MAX_JSON_BYTES:
        raise MercorImportError(f"{path}: {path.stat().st_size:,} bytes, more than the {MAX_JSON_BYTES:,} a task's "
                                "configuration may hold; refused")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError as exc:
        raise MercorImportError(f"{path}: JSON nested deeper than Python's parser takes; refused") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise MercorImportError(f"{path}: not valid JSON ({exc})") from exc
    try:
        if isinstance(model, type) and issubclass(model, BaseModel):
            return model.model_validate(data)
        from pydantic import TypeAdapter

        return TypeAdapter(model).validate_python(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(top level)'}: {e['msg']}" for e in exc.errors())
        raise MercorImportError(f"{path}: {problems}") from exc


def find_checkout(src: Path, given: Path | None) -> Path:
    """The Mercor checkout whose ``mcp_servers/`` the task's servers come from."""
    if given is not None:
        checkout = given.resolve()
    elif os.environ.get(CHECKOUT_ENV):
        checkout = Path(os.environ[CHECKOUT_ENV]).resolve()
    else:
        found = next((p for p in src.resolve().parents if (p / "mcp_servers").is_dir()), None)
        if found is None:
            raise MercorImportError(f"no Mercor checkout found above {src}: give --checkout (a clone of "
                                    f"Mercor-Intelligence/archipelago, the folder holding mcp_servers/) or set {CHECKOUT_ENV}")
        checkout = found
    if not (checkout / "mcp_servers").is_dir():
        raise MercorImportError(f"{checkout}: no mcp_servers/ folder; the checkout is a clone of Mercor's archipelago")
    return checkout


def server_name(key: str) -> str:
    """A tackroom server name (tool prefix) for a Mercor server key: ``filesystem_server`` -> ``filesystem``."""
    name = re.sub(r"[^a-z0-9]", "", key.lower().removesuffix("_server").removesuffix("-server"))
    return name if name[:1].isalpha() else f"s{name}"


def _join(base: str | None, path: str | None) -> str:
    """``path`` against ``base`` the way a shell would (both POSIX, as Mercor's configs are written)."""
    if not path:
        return base or ""
    return path if path.startswith("/") or not base else f"{base.rstrip('/')}/{path}"


def _locate(key: str, path: str, checkout: Path, *, what: str, where: Path) -> tuple[str, list[str]]:
    """The ``mcp_servers/<server>`` folder ``path`` lies in, and the parts of ``path`` below it."""
    parts = PurePosixPath(path).parts
    at = next((i for i in range(len(parts) - 1) if parts[i] == "mcp_servers"), None)
    available = sorted(p.name for p in (checkout / "mcp_servers").iterdir() if (p / "pyproject.toml").is_file())
    if at is None:
        raise MercorImportError(f"{where}: server {key!r} has {what} {path!r}, which names no mcp_servers/<server> "
                                f"folder; the checkout {checkout} has: {', '.join(available) or 'none'}")
    folder = parts[at + 1]
    if ".." in parts[at:]:
        raise MercorImportError(f"{where}: server {key!r} has {what} {path!r}, which climbs with '..'; refused")
    if folder not in available:
        raise MercorImportError(f"{where}: unknown server {key!r}: the checkout {checkout} has no mcp_servers/{folder} "
                                f"project; it has: {', '.join(available) or 'none'} (fetch the full repository for "
                                "the others)")
    return folder, list(parts[at + 2:])


def apps_data_path(value: str) -> str:
    """An env value naming Mercor's ``/.apps_data`` (``APP_MAIL_DATA_ROOT=/.apps_data/mail``,
    ``STATE_LOCATION=/.apps_data/chat``) moved to where the import puts it, under the graded mount."""
    if value == "/.apps_data" or value.startswith("/.apps_data/"):
        return MOUNT + value
    return value


def map_server(key: str, entry: McpServerEntry, checkout: Path, *, where: Path) -> tuple[str, dict[str, Any]]:
    """One ``mcp_config.json`` entry as a ``[[servers]]`` table running from the checkout's project.

    A ``uv run`` command is rewritten to what uv would run in the project's environment (uv_commands.py):
    ``uv run --directory D python -m server`` runs ``python -m server`` in D; one that cannot be read so is
    refused with the reason and the entry to write instead."""
    if entry.transport != "stdio":
        raise MercorImportError(f"{where}: server {key!r} uses transport {entry.transport!r}; tackroom starts "
                                "Mercor's servers over stdio")
    command, python, run_dir, project_dir = [entry.command, *entry.args], None, entry.cwd or "", None
    if is_uv(entry.command):
        try:
            uv = parse_uv_run(entry.command, entry.args)
        except UvCommandError as exc:
            raise MercorImportError(
                f"{where}: server {key!r} runs `{shlex.join(command)}`: {exc}. tackroom runs a Mercor server in its "
                "uv project's own environment, without uv: write the entry as `\"command\": \"python\", \"args\": "
                "[\"main.py\"]` with `cwd` the server's folder under mcp_servers/<server>/ (or, by hand, a "
                "[[servers]] table with project = \".../mcp_servers/<server>\" and command = [\"python\", ...])"
            ) from exc
        command, python = uv.command, uv.python
        run_dir = _join(entry.cwd, uv.directory)
        project_dir = _join(run_dir, uv.project) if uv.project else None
    folder, below = _locate(key, run_dir, checkout, what="cwd" if run_dir == (entry.cwd or "") else "directory",
                            where=where)
    if project_dir is not None:
        named, _ = _locate(key, project_dir, checkout, what="project", where=where)
        if named != folder:
            raise MercorImportError(f"{where}: server {key!r} runs in mcp_servers/{folder} with the project "
                                    f"mcp_servers/{named}; tackroom runs a server in its own project's folder")
    env = {**{k: apps_data_path(v) for k, v in entry.env.items()}, "MCP_TRANSPORT": "stdio",
           "APP_APPS_DATA_ROOT": APPS_DATA}
    table = {
        "name": server_name(key),
        "project": f"${{{CHECKOUT_ENV}:-{checkout}}}/mcp_servers/{folder}",
        "cwd": str(PurePosixPath(*below)) if below else ".",
        "command": command,
        "env": env,
    }
    if python:
        table["python"] = python
    return folder, table


def _find_snapshot(src: Path) -> Path:
    for name in SNAPSHOT_NAMES:
        if _regular_file(src / name):
            return src / name
    raise MercorImportError(f"{src}: no world snapshot; expected one of {', '.join(SNAPSHOT_NAMES)}")


def _arrange_files(unpacked: Path, files: Path, archive: Path) -> None:
    """Move the snapshot's ``filesystem/`` (or all of it) to ``files``; ``.apps_data/`` beneath it."""
    top = {p.name: p for p in unpacked.iterdir()}
    if "filesystem" not in top:
        shutil.move(unpacked, files)
        return
    others = sorted(set(top) - {"filesystem", ".apps_data"})
    if others:
        raise MercorImportError(f"{archive}: top-level {', '.join(others)} beside filesystem/; tackroom imports "
                                "filesystem/ and .apps_data/ only")
    shutil.move(top["filesystem"], files)
    if ".apps_data" in top:
        if (files / ".apps_data").exists():
            raise MercorImportError(f"{archive}: both filesystem/.apps_data and .apps_data/; refused")
        shutil.move(top[".apps_data"], files / ".apps_data")


def _toml(value: Any) -> str:
    """A TOML value (strings through JSON, whose escapes TOML's basic strings share)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {type(value).__name__}")


def _write_toml(path: Path, text: str) -> None:
    tomllib.loads(text)  # what we write must read back
    path.write_text(text, encoding="utf-8")


def import_task(src: Path, dest: Path, *, checkout: Path | None = None, image: str = IMAGE,
                limits: SnapshotLimits | None = None) -> ImportedTask:
    """Import one Mercor task folder ``src`` as the tackroom task folder ``dest`` (which must not exist)."""
    src = src.resolve()
    if not src.is_dir():
        raise MercorImportError(f"{src}: not a folder (a Mercor task folder holds initial_messages.json, ...)")
    if dest.exists():
        raise MercorImportError(f"{dest}: already exists; import into a new folder")
    messages: list[InitialMessage] = _read_json(src / "initial_messages.json", list[InitialMessage])
    config: McpConfig = _read_json(src / "mcp_config.json", McpConfig)
    verifiers: list[MercorVerifier] = _read_json(src / "verifiers.json", list[MercorVerifier])
    agent = (_read_json(src / "agent_config.json", AgentConfig) if (src / "agent_config.json").is_symlink()
             or (src / "agent_config.json").exists() else AgentConfig())
    where = src / "initial_messages.json"
    system = "\n\n".join(m.text(str(where)) for m in messages if m.role == "system")
    user = "\n\n".join(m.text(str(where)) for m in messages if m.role == "user")
    if not user.strip():
        raise MercorImportError(f"{where}: no user message; a task needs one")
    if any(m.role == "assistant" for m in messages):
        raise MercorImportError(f"{where}: assistant turns in the initial messages cannot be imported")
    if not verifiers:
        raise MercorImportError(f"{src / 'verifiers.json'}: no criteria; the rubric-judge verifier needs one")
    checkout_dir = find_checkout(src, checkout)
    snapshot = _find_snapshot(src)

    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        unpacked = staging / "unpacked"
        written = unpack_snapshot(snapshot, unpacked, limits)
        world = staging / "task" / "world"
        world.mkdir(parents=True)
        _arrange_files(unpacked, world / "files", snapshot)
        servers: dict[str, str] = {}
        tables = []
        for key, entry in config.mcpServers.items():
            folder, table = map_server(key, entry, checkout_dir, where=src / "mcp_config.json")
            if table["name"] in servers:
                raise MercorImportError(f"{src / 'mcp_config.json'}: two servers map to the name {table['name']!r}")
            servers[table["name"]] = folder
            tables.append(table)
        _write_toml(world / "world.toml", _world_toml(src, tables))
        _write_toml(staging / "task" / "task.toml", _task_toml(src, system, verifiers, image, agent))
        (staging / "task" / "instruction.md").write_text(user.rstrip() + "\n", encoding="utf-8")
        (staging / "task" / "mercor").mkdir()
        for name in COPIED:
            if _regular_file(src / name):
                shutil.copyfile(src / name, staging / "task" / "mercor" / name)
        (staging / "task").rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return ImportedTask(name=dest.name, path=dest, servers=servers, criteria=len(verifiers), files=len(written),
                        max_steps=agent.agent_config_values.max_steps)


def _world_toml(src: Path, tables: list[dict[str, Any]]) -> str:
    lines = [f"# Imported from the Mercor task {src} by `tackroom archipelago import-mercor`.",
             f"# Servers run from ${CHECKOUT_ENV} (default: the checkout found at import); they need Python 3.13.",
             "", "[world]", f"name = {_toml(src.name)}", "", "[files]", 'source = "files"', f"mount = {_toml(MOUNT)}",
             "", "[runtime]", "startup_timeout_sec = 600.0   # each server takes tens of seconds to list its tools"]
    for t in tables:
        lines += ["", "[[servers]]", *(f"{k} = {_toml(v)}" for k, v in t.items())]
    return "\n".join(lines) + "\n"


def _task_toml(src: Path, system: str, verifiers: list[MercorVerifier], image: str, agent: AgentConfig) -> str:
    lines = ['version = "1.0"', "", "[world]", 'path = "world"']
    if system.strip():
        lines.append(f"system_prompt = {_toml(system)}")
    lines += ["", "[environment]", f"docker_image = {_toml(image)}   # Mercor's servers need Python 3.13"]
    if agent.agent_config_values.timeout:
        lines += ["", "[agent]", f"timeout_sec = {_toml(float(agent.agent_config_values.timeout))}"]
    lines += ["", "[metadata]", 'tags = ["mercor"]', "",
              "[rubric_judge]   # the judge sees what changed under the snapshot, against the snapshot as imported",
              f"files = [{_toml(MOUNT)}]", f'baseline = {{ {_toml(MOUNT)} = "world/files" }}']
    for v in sorted(verifiers, key=lambda v: v.verifier_index):
        lines += ["", "[[rubric]]", f"id = {_toml(v.verifier_id)}", f"criterion = {_toml(v.verifier_values.criteria)}",
                  f"weight = {2.0 if v.verifier_values.is_primary_objective else 1.0}"]
    return "\n".join(lines) + "\n"


def task_folders(src: Path) -> list[Path]:
    """``src`` itself when it is a Mercor task folder, else its sub-folders that are."""
    if not src.is_dir():
        raise MercorImportError(f"{src}: no such folder")
    if (src / "initial_messages.json").exists():
        return [src]
    found = sorted(p for p in src.iterdir() if not p.is_symlink() and (p / "initial_messages.json").is_file())
    if not found:
        raise MercorImportError(f"{src}: neither a Mercor task folder (initial_messages.json, mcp_config.json, "
                                "verifiers.json, a snapshot) nor a folder of them")
    return found


def import_tasks(src: Path, dest: Path, *, checkout: Path | None = None, image: str = IMAGE,
                 limits: SnapshotLimits | None = None) -> list[ImportedTask]:
    """Import every Mercor task under ``src`` into ``dest/<task>/`` and write ``dest/run.toml``."""
    imported = [import_task(folder, dest / re.sub(r"[^A-Za-z0-9_.-]", "-", folder.name), checkout=checkout,
                            image=image, limits=limits)
                for folder in task_folders(src)]
    steps = max((t.max_steps for t in imported if t.max_steps), default=None)
    run = ["# Runs the imported Mercor tasks: `tackroom run -c run.toml --base-url ...` (and a judge: see the",
           "# rubric-judge README for base_url/model).", 'tasks = ["."]', "", "[harness]", 'name = "archipelago"',
]
    if steps:
        run.append(f"max_steps = {steps}")
    run += ["", "[sandbox]", 'name = "docker"',
            f"output_limit_bytes = {EXEC_OUTPUT_LIMIT}   # an image answer through the exec relay is base64 twice (16/9",
            "                                # of the image): room for the harness's image_max_bytes (5,000,000)",
            "", "[verifier]", 'name = "rubric-judge"']
    if not (dest / "run.toml").exists():
        _write_toml(dest / "run.toml", "\n".join(run) + "\n")
    return imported


__all__ = ["CHECKOUT_ENV", "ImportedTask", "find_checkout", "import_task", "import_tasks", "map_server",
           "server_name", "task_folders"]
