"""``tackroom archipelago import-mercor``: Mercor's task packaging as tackroom world tasks, and hostile snapshots.

The sample is Mercor's public ``examples/simple_task`` in ``../shared/mercor-archipelago`` (or
``$TACKROOM_MERCOR_ARCHIPELAGO``); the error-path tests build their own task folders.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tackroom import load_task
from tackroom.testing import skip_or_fail
from tackroom_archipelago.cli import add_archipelago_commands
from tackroom_archipelago.errors import MercorImportError, WorldFormatError
from tackroom_archipelago.mercor_import import import_task, import_tasks, server_name
from tackroom_archipelago.snapshot_archive import SnapshotLimits, UnsafeArchiveError, unpack_snapshot
from tackroom_archipelago.world import load_world, task_system_prompt, task_world_dir
from tackroom_rubric_judge.baseline import baseline_snapshot, task_settings
from tackroom_rubric_judge.rubric import task_rubric

REPO = Path(__file__).resolve().parents[4]
CHECKOUT = Path(os.environ.get("TACKROOM_MERCOR_ARCHIPELAGO") or REPO.parent / "shared" / "mercor-archipelago")
SAMPLE = CHECKOUT / "examples" / "simple_task"
app = typer.Typer()  # the root app, as `tackroom` hands it to the tackroom_commands hook
add_archipelago_commands(app)


def mercor_checkout() -> Path:
    if not (CHECKOUT / "mcp_servers" / "filesystem" / "pyproject.toml").is_file():
        skip_or_fail(f"no Mercor archipelago checkout at {CHECKOUT} (../shared/mercor-archipelago beside the repo, "
                     "or set TACKROOM_MERCOR_ARCHIPELAGO to a clone of Mercor-Intelligence/archipelago)")
    return CHECKOUT


# -- the public sample --------------------------------------------------------------------------------
def test_the_public_sample_imports_as_a_world_task(tmp_path):
    mercor_checkout()
    [imported] = import_tasks(SAMPLE, tmp_path / "tasks")
    assert imported.servers == {"filesystem": "filesystem"} and imported.criteria == 1 and imported.files == 4
    task = load_task(imported.path)
    assert "find the gorilla" in task.instruction
    assert task_system_prompt(task).startswith("You are an AI assistant that completes tasks")
    world = load_world(task_world_dir(task))
    assert world.files.mount == "/filesystem"
    assert (world.files_dir / "animals" / "xk92m" / "qz7fw.png").stat().st_size == 20860
    [server] = world.servers
    assert (server.name, server.command, server.cwd) == ("filesystem", ["python", "main.py"], "mcp_servers/filesystem_server")
    assert server.env["MCP_TRANSPORT"] == "stdio"
    assert world.projects["filesystem"].path == (CHECKOUT / "mcp_servers" / "filesystem").resolve()
    assert world.projects["filesystem"].requires_python == ">=3.13,<3.14"
    [criterion] = task_rubric(task)
    assert criterion.id == "ver_001" and "/animals/xk92m/qz7fw.png" in criterion.criterion
    settings = task_settings(task)
    assert settings.files == ["/filesystem"]
    baseline = baseline_snapshot(task, settings, max_file_bytes=10**6)
    assert "/filesystem/animals/mn83p/jw9vb.png" in baseline.files
    assert task.config.environment.docker_image == "python:3.13-slim-bookworm"
    assert json.loads((imported.path / "mercor" / "verifiers.json").read_text())[0]["verifier_id"] == "ver_001"
    run = tomllib.loads((tmp_path / "tasks" / "run.toml").read_text())
    assert run["harness"]["max_steps"] == 20 and run["sandbox"]["output_limit_bytes"] == 12_000_000


def test_the_cli_imports_and_reports(tmp_path):
    mercor_checkout()
    result = CliRunner().invoke(app, ["archipelago", "import-mercor", str(SAMPLE), str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "4 files, servers filesystem (filesystem), 1 criteria" in result.output
    again = CliRunner().invoke(app, ["archipelago", "import-mercor", str(SAMPLE), str(tmp_path / "out")])
    assert again.exit_code == 2 and "already exists" in again.output


# -- error paths ------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _checkout_from_the_task_folder(request, monkeypatch):
    """The fake tasks find their fake checkout above them, whatever the environment names."""
    if "fake" in request.node.name or "error" in request.node.name or "missing" in request.node.name:
        monkeypatch.delenv("TACKROOM_MERCOR_ARCHIPELAGO", raising=False)


def fake_checkout(root: Path) -> Path:
    project = root / "checkout" / "mcp_servers" / "filesystem"
    project.mkdir(parents=True)
    (project / "pyproject.toml").write_text('[project]\nname = "fs"\nrequires-python = ">=3.13"\n')
    (project / "mcp_servers" / "filesystem_server").mkdir(parents=True)
    return root / "checkout"


def zip_bytes(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return out.getvalue()


def fake_task(root: Path, **overrides: object) -> Path:
    task = root / "checkout" / "examples" / "t1"
    task.mkdir(parents=True)
    files: dict[str, object] = {
        "initial_messages.json": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Find it."}],
        "mcp_config.json": {"mcpServers": {"filesystem_server": {
            "transport": "stdio", "command": "python", "args": ["main.py"],
            "cwd": "/app/mcp_servers/filesystem/mcp_servers/filesystem_server"}}},
        "verifiers.json": [{"verifier_id": "v1", "verifier_values": {"criteria": "It was found"}}],
        "original_snapshot.zip": zip_bytes({"filesystem/a/b.txt": b"hello"}),
    }
    files.update(overrides)
    for name, content in files.items():
        if content is None:
            continue
        path = task / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(content)
        else:
            path.write_text(json.dumps(content))
    return task


def test_a_well_formed_fake_task_imports(tmp_path):
    fake_checkout(tmp_path)
    imported = import_task(fake_task(tmp_path), tmp_path / "out" / "t1")  # the checkout is found above the task
    assert (imported.path / "world" / "files" / "a" / "b.txt").read_text() == "hello"
    assert task_system_prompt(load_task(imported.path)) == "Be brief."


def test_apps_data_paths_in_a_servers_env_move_under_the_graded_mount(tmp_path):
    """Mercor's configs point the apps at /.apps_data (APP_MAIL_DATA_ROOT=/.apps_data/mail): the import puts the
    snapshot's .apps_data under /filesystem, so such values move there (the servers find their data, the judge sees
    its changes); a server without one gets APP_APPS_DATA_ROOT, whether or not the snapshot had .apps_data."""
    fake_checkout(tmp_path)
    env = {"APP_MAIL_DATA_ROOT": "/.apps_data/mail", "STATE_LOCATION": "/.apps_data", "APP_FS_ROOT": "/filesystem",
           "NOT_APPS": "/.apps_data_old/x", "RELATIVE": ".apps_data/mail"}
    config = {"mcpServers": {"filesystem_server": {"command": "python", "args": ["main.py"], "env": env,
                                                   "cwd": "/app/mcp_servers/filesystem/mcp_servers/filesystem_server"}}}
    imported = import_task(fake_task(tmp_path, **{"mcp_config.json": config}), tmp_path / "out" / "t1")
    [server] = load_world(imported.path / "world").servers
    assert server.env == {"APP_MAIL_DATA_ROOT": "/filesystem/.apps_data/mail", "STATE_LOCATION": "/filesystem/.apps_data",
                          "APP_FS_ROOT": "/filesystem", "NOT_APPS": "/.apps_data_old/x", "RELATIVE": ".apps_data/mail",
                          "MCP_TRANSPORT": "stdio", "APP_APPS_DATA_ROOT": "/filesystem/.apps_data"}
    assert not (imported.path / "world" / "files" / ".apps_data").exists()  # this snapshot had none


@pytest.mark.parametrize(("overrides", "message"), [
    ({"initial_messages.json": None}, r"initial_messages.json: missing"),
    ({"mcp_config.json": "{not json"}, r"mcp_config.json: not valid JSON"),
    ({"verifiers.json": [{"verifier_id": "v1", "verifier_values": {}}]}, r"verifiers.json: 0.verifier_values.criteria"),
    ({"verifiers.json": []}, "no criteria"),
    ({"initial_messages.json": [{"role": "system", "content": "x"}]}, "no user message"),
    ({"initial_messages.json": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "has a 'image_url' part"),
    ({"mcp_config.json": {"mcpServers": {"mail_server": {"command": "python", "args": ["main.py"],
                                                         "cwd": "/app/mcp_servers/mail/mcp_servers/mail_server"}}}},
     r"unknown server 'mail_server': the checkout .* has no mcp_servers/mail project; it has: filesystem"),
    ({"mcp_config.json": {"mcpServers": {"x": {"command": "npx", "args": ["srv"], "cwd": "/srv"}}}},
     "names no mcp_servers/<server> folder"),
    ({"mcp_config.json": {"mcpServers": {"x": {"transport": "http", "command": "python"}}}}, "transport 'http'"),
    ({"mcp_config.json": {"mcpServers": {"x": {"command": "python", "cwd": "/app/mcp_servers/filesystem/../../../etc"}}}},
     "climbs with '..'"),
    ({"original_snapshot.zip": None}, "no world snapshot"),
    ({"original_snapshot.zip": zip_bytes({"filesystem/a": b"1", "secrets/b": b"2"})}, "top-level secrets beside"),
], ids=["no-messages", "bad-json", "no-criteria-text", "empty-rubric", "no-user", "image-part", "unknown-server",
        "unmappable-server", "http-transport", "cwd-dotdot", "no-snapshot", "extra-top-level"])
def test_import_errors_name_the_file_and_the_fix(tmp_path, overrides, message):
    fake_checkout(tmp_path)
    with pytest.raises(MercorImportError, match=message):
        import_task(fake_task(tmp_path, **overrides), tmp_path / "out" / "t1")
    assert not (tmp_path / "out" / "t1").exists()
    assert not [p for p in (tmp_path / "out").iterdir()] if (tmp_path / "out").exists() else True


@pytest.mark.parametrize("name", ["scoring_config.json", "original_snapshot.zip", "verifiers.json",
                                  "agent_config.json"])
def test_a_file_linked_out_of_the_task_folder_is_refused_not_copied(tmp_path, name):
    """A hostile task folder links a host file where the importer copies (scoring_config.json into the task) or
    unpacks (the snapshot into world/files/, which every sandbox of the task then holds)."""
    fake_checkout(tmp_path)
    host = tmp_path / "host"
    host.mkdir()
    (host / name).write_bytes(zip_bytes({"filesystem/host-secret.txt": b"HOST"}) if name.endswith(".zip")
                              else b'{"host": "secret"}')
    task = fake_task(tmp_path, **{name: None})
    os.symlink(host / name, task / name)
    with pytest.raises(MercorImportError, match=f"{name}: a symbolic link .* nothing is read through a link"):
        import_task(task, tmp_path / "out" / "t1")
    assert not (tmp_path / "out" / "t1").exists()


def test_a_linked_task_folder_in_a_dataset_is_not_imported_and_deep_json_is_refused(tmp_path):
    fake_checkout(tmp_path)
    task = fake_task(tmp_path)
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    os.symlink(task, dataset / "linked-task")
    with pytest.raises(MercorImportError, match="neither a Mercor task folder"):
        import_tasks(dataset, tmp_path / "out")
    (task / "verifiers.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(MercorImportError, match="verifiers.json: JSON nested deeper"):
        import_task(task, tmp_path / "out" / "t1")


def test_a_missing_folder_or_checkout_is_named(tmp_path, monkeypatch):
    with pytest.raises(MercorImportError, match="no such folder"):
        import_tasks(tmp_path / "nowhere", tmp_path / "out")
    monkeypatch.delenv("TACKROOM_MERCOR_ARCHIPELAGO", raising=False)
    task = fake_task(tmp_path)
    shutil.rmtree(tmp_path / "checkout" / "mcp_servers", ignore_errors=True)
    with pytest.raises(MercorImportError, match="no Mercor checkout found above"):
        import_task(task, tmp_path / "out" / "t1")
    with pytest.raises(MercorImportError, match="no mcp_servers/ folder"):
        import_task(task, tmp_path / "out" / "t1", checkout=tmp_path)
    result = CliRunner().invoke(app, ["archipelago", "import-mercor", str(tmp_path / "nowhere"), str(tmp_path / "o")])
    assert result.exit_code == 2 and "no such folder" in result.output


def test_server_names_become_tool_prefixes():
    assert [server_name(k) for k in ("filesystem_server", "chat-server", "Mail_Server", "3d")] == \
        ["filesystem", "chat", "mail", "s3d"]


# -- hostile snapshots ------------------------------------------------------------------------------
def tar_bytes(add) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        add(tar)
    return out.getvalue()


def tar_member(tar: tarfile.TarFile, name: str, data: bytes = b"x", **kind: object) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data) if not kind else 0
    for key, value in kind.items():
        setattr(info, key, value)
    tar.addfile(info, io.BytesIO(data) if not kind else None)


def zip_symlink() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        info = zipfile.ZipInfo("filesystem/link")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "/etc/passwd")
    return out.getvalue()


HOSTILE = {
    "zip-dotdot": ("s.zip", zip_bytes({"filesystem/../../evil.txt": b"x"}), "climbs out of the snapshot"),
    "zip-absolute": ("s.zip", zip_bytes({"/etc/evil": b"x"}), "is an absolute path"),
    "zip-symlink": ("s.zip", zip_symlink(), "is a symbolic link"),
    "zip-bomb": ("s.zip", zip_bytes({"filesystem/zeros": b"\0" * 50_000_000}), "refused as a zip bomb"),
    "zip-duplicate": ("s.zip", zip_bytes({"a": b"1", "./a": b"2"}), "appears twice"),
    "zip-backslash": ("s.zip", zip_bytes({"..\\evil": b"1"}), "backslash"),
    "tar-symlink": ("s.tar.gz", tar_bytes(lambda t: tar_member(t, "filesystem/l", type=tarfile.SYMTYPE,
                                                               linkname="/etc/passwd")), "is a link"),
    "tar-hardlink": ("s.tar.gz", tar_bytes(lambda t: tar_member(t, "filesystem/h", type=tarfile.LNKTYPE,
                                                                linkname="etc/passwd")), "is a link"),
    "tar-device": ("s.tar.gz", tar_bytes(lambda t: tar_member(t, "filesystem/d", type=tarfile.CHRTYPE)),
                   "device or special file"),
    "tar-dotdot": ("s.tar.gz", tar_bytes(lambda t: tar_member(t, "../evil")), "climbs out"),
    "tar-absolute": ("s.tar.gz", tar_bytes(lambda t: tar_member(t, "/tmp/evil")), "absolute path"),
    "tar-too-big": ("s.tar.gz", tar_bytes(lambda t: tar_member(t, "filesystem/big", b"\0" * 3_000_000)),
                    "more than 1000000 bytes"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_snapshots_are_refused_and_leave_nothing(tmp_path, case):
    name, data, message = HOSTILE[case]
    archive = tmp_path / name
    archive.write_bytes(data)
    with pytest.raises(UnsafeArchiveError, match=message):
        unpack_snapshot(archive, tmp_path / "out", SnapshotLimits(max_bytes=1_000_000) if "big" in case else None)
    assert not (tmp_path / "out").exists() and not (tmp_path.parent / "evil.txt").exists()


def test_member_and_byte_caps_count_what_comes_out(tmp_path):
    archive = tmp_path / "many.zip"
    archive.write_bytes(zip_bytes({f"f{i}": b"x" for i in range(20)}))
    with pytest.raises(UnsafeArchiveError, match="more than 10 members"):
        unpack_snapshot(archive, tmp_path / "a", SnapshotLimits(max_members=10))
    with pytest.raises(UnsafeArchiveError, match="unpacks to more than 15 bytes"):
        unpack_snapshot(archive, tmp_path / "b", SnapshotLimits(max_bytes=15))
    assert len(unpack_snapshot(archive, tmp_path / "c")) == 20


def test_a_broken_archive_and_a_hostile_sample_through_the_importer(tmp_path):
    archive = tmp_path / "broken.zip"
    archive.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(WorldFormatError, match="neither a zip nor a tar|broken archive"):
        unpack_snapshot(archive, tmp_path / "x")
    fake_checkout(tmp_path)
    task = fake_task(tmp_path, **{"original_snapshot.zip": zip_bytes({"filesystem/../../../evil": b"x"})})
    with pytest.raises(UnsafeArchiveError, match="climbs out"):
        import_task(task, tmp_path / "out" / "t1")
    assert not (tmp_path / "out" / "t1").exists()


# -- uv run commands in mcp_config.json -----------------------------------------------------------------
FS = "/app/mcp_servers/filesystem"


def uv_config(command: str, args: list[str], cwd: str | None = None) -> dict:
    entry: dict = {"transport": "stdio", "command": command, "args": args}
    if cwd is not None:
        entry["cwd"] = cwd
    return {"mcpServers": {"filesystem_server": entry}}


@pytest.mark.parametrize(("config", "command", "cwd", "python"), [
    (uv_config("uv", ["run", "--directory", f"{FS}/mcp_servers/filesystem_server", "python", "main.py"]),
     ["python", "main.py"], "mcp_servers/filesystem_server", None),
    (uv_config("uv", ["run", "main.py"], cwd=f"{FS}/mcp_servers/filesystem_server"),
     ["python", "main.py"], "mcp_servers/filesystem_server", None),
    (uv_config("/usr/local/bin/uv", ["--directory", FS, "run", "--frozen", "-q", "--python", "3.13", "-m",
                                     "mcp_servers.filesystem_server.main", "--verbose"]),
     ["python", "-m", "mcp_servers.filesystem_server.main", "--verbose"], ".", "python3.13"),
    (uv_config("uv", ["run", "--project", FS, "--no-sync", "--color", "never", "python3", "main.py"],
               cwd=f"{FS}/mcp_servers/filesystem_server"),
     ["python", "main.py"], "mcp_servers/filesystem_server", None),
    (uv_config("uv", ["run", "--directory", "mcp_servers/filesystem_server", "--", "python", "main.py"], cwd=FS),
     ["python", "main.py"], "mcp_servers/filesystem_server", None),
    (uv_config("uv", ["run", "--extra", "ocr", "--all-extras", "main.py"], cwd=f"{FS}/mcp_servers/filesystem_server"),
     ["python", "main.py"], "mcp_servers/filesystem_server", None),  # the project's site holds every extra
], ids=["directory-python", "cwd-script", "global-directory-module-python", "project-apart", "relative-directory",
        "extras"])
def test_uv_run_commands_become_project_servers(tmp_path, config, command, cwd, python):
    checkout = fake_checkout(tmp_path)
    imported = import_task(fake_task(tmp_path, **{"mcp_config.json": config}), tmp_path / "out" / "t1",
                           checkout=checkout)
    [server] = load_world(imported.path / "world").servers  # the world loads: project and cwd exist
    assert (server.name, server.command, server.cwd, server.python) == ("filesystem", command, cwd, python)
    assert server.project.endswith("/mcp_servers/filesystem")


@pytest.mark.parametrize(("command", "args", "message"), [
    ("uv", ["run", "--with", "requests", "python", "main.py"], "`--with` adds packages outside the project"),
    ("uv", ["run", "--group", "dev", "main.py"], "`--group` installs a dependency group"),
    ("uv", ["run", "--env-file", ".env", "main.py"], "reads the server's environment from a file"),
    ("uvx", ["mercor-filesystem"], "`uvx` runs a published package"),
    ("uv", ["tool", "run", "mercor-filesystem"], "`uv tool run` runs a published package"),
    ("uv", ["pip", "install", "x"], "`uv pip` is not `uv run`"),
    ("uv", ["run", "filesystem-server"], "runs a console script or program \\('filesystem-server'\\)"),
    ("uv", ["run", "--bogus", "main.py"], "`--bogus` is not a uv option"),
    ("uv", ["run", "--python", "pypy", "main.py"], "`--python pypy` is not a Python version"),
    ("uv", ["run"], "names no command"),
    ("uv", ["--directory", FS], "`uv` without `run`"),
    ("uv", ["run", "--directory"], "`--directory` has no value"),
    ("uv", ["run", "--directory", f"{FS}/../../../etc", "python", "x.py"], "climbs with '..'"),
    ("uv", ["run", "--project", "/app/mcp_servers/chat", "main.py"],
     "runs in mcp_servers/filesystem with the project mcp_servers/chat; tackroom runs a server in its own"),
    ("uv", ["run", "--project", "/app/mcp_servers/mail", "main.py"], "unknown server 'filesystem_server'"),
], ids=["with", "group", "env-file", "uvx", "tool-run", "pip", "console-script", "unknown-option", "bad-python",
        "no-command", "no-run", "no-value", "dotdot", "other-project", "unknown-project"])
def test_uv_commands_that_cannot_be_read_are_refused_with_what_to_write(tmp_path, command, args, message):
    checkout = fake_checkout(tmp_path)
    (checkout / "mcp_servers" / "chat").mkdir()
    (checkout / "mcp_servers" / "chat" / "pyproject.toml").write_text('[project]\nname = "chat"\n')
    config = uv_config(command, args, cwd=f"{FS}/mcp_servers/filesystem_server")
    with pytest.raises(MercorImportError, match=message) as raised:
        import_task(fake_task(tmp_path, **{"mcp_config.json": config}), tmp_path / "out" / "t1", checkout=checkout)
    if "--project" not in args:
        assert "server 'filesystem_server' runs `" in str(raised.value)  # the server and its command, named
        assert 'write the entry as `"command": "python", "args": ["main.py"]`' in str(raised.value)
    assert not (tmp_path / "out" / "t1").exists()


def test_the_sample_written_with_uv_run_imports_to_the_same_server(tmp_path):
    """Mercor's sample with its server started by `uv run --directory ...` imports to exactly the [[servers]] table
    of the sample as published (which test_mercor_world runs against the real server)."""
    mercor_checkout()
    [plain] = import_tasks(SAMPLE, tmp_path / "plain")
    variant = tmp_path / "uv-sample"
    variant.mkdir()
    for file in SAMPLE.iterdir():
        if file.name != "mcp_config.json":
            shutil.copyfile(file, variant / file.name)  # copies: the importer follows no link
    config = json.loads((SAMPLE / "mcp_config.json").read_text())
    entry = config["mcpServers"]["filesystem_server"]
    entry["args"] = ["run", "--directory", entry.pop("cwd"), "--frozen", "python", *entry["args"]]
    entry["command"] = "uv"
    (variant / "mcp_config.json").write_text(json.dumps(config))
    [rewritten] = import_tasks(variant, tmp_path / "uv", checkout=CHECKOUT)
    assert load_world(rewritten.path / "world").servers == load_world(plain.path / "world").servers
