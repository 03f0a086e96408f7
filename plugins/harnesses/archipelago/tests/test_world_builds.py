"""A world's build (packages, server projects, gateway) is made once per world version and bound read-only into
every trial's sandbox, and no trial reaches the next: the agent's code (through the world's own code tool) cannot
change the build, plant a start-up hook in it or leave a file for the next trial, and a project server that writes
beside its code writes into a copy of its own."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import textwrap
import uuid
from pathlib import Path

import pytest
from archipelago_paths import TASKS, WORLD
from archipelago_scripted_engine import ScriptedEngine, call
from test_world_projects import make_project, make_world

from tackroom import Policy, load_task
from tackroom_app import sandbox_spec
from tackroom_archipelago import ArchipelagoHarness
from tackroom_archipelago.builds import COMPLETE, host_python
from tackroom_archipelago.world import load_world, world_version
from tackroom_local import LocalSandboxProvider

BUILD = "/mnt/tackroom-world"


async def trial(task, script: list[str], **options):
    """One trial as the runtime runs it on a sandbox that binds mounts: the harness's mounts, then setup and run."""
    harness = ArchipelagoHarness({"max_steps": len(script) + 1, **options})
    spec = sandbox_spec(task, "archipelago-builds")
    box = LocalSandboxProvider().create(spec.model_copy(update={"mounts": await harness.mounts(task)}))
    await box.start()
    try:
        await harness.setup(box, task)
        async with ScriptedEngine(script) as engine:
            traj = await harness.run(task, box, Policy(base_url=engine.url, model="scripted"))
    finally:
        await box.stop()
    return harness, [m["content"] for m in traj.messages if m["role"] == "tool"]


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): (f"link:{p.readlink()}" if p.is_symlink() else
                                       hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else f"dir {p.stat().st_mode:o}")
            for p in sorted(root.rglob("*"))}


ATTACK = textwrap.dedent("""\
    import glob, os, pathlib
    changed = []
    targets = glob.glob('/mnt/tackroom-world/**/acme_mcp/*.py', recursive=True)
    targets += glob.glob('/mnt/tackroom-world/gateway/*/site/mcp/__init__.py')
    for path in targets:
        try:
            with open(path, 'a') as f:
                f.write('raise SystemExit(1)')
            changed.append(path)
        except OSError:
            pass
    for path in ['/mnt/tackroom-world/planted.py'] + [s + '/sitecustomize.py' for s in glob.glob('/mnt/tackroom-world/gateway/*/site')]:
        try:
            pathlib.Path(path).write_text('print(1)')
            changed.append(path)
        except OSError:
            pass
    try:
        os.rename('/mnt/tackroom-world', '/mnt/elsewhere')
        changed.append('renamed')
    except OSError:
        pass
    pathlib.Path('/workspace/left-by-trial-one.txt').write_text('x')
    pathlib.Path('/tmp/left-by-trial-one.txt').write_text('x')
    print('changed', len(targets), changed)
""")
LOOK = ("import os; print([os.path.exists(p) for p in ('/workspace/left-by-trial-one.txt', "
        "'/tmp/left-by-trial-one.txt', '/mnt/tackroom-world/planted.py')])")


async def test_the_build_is_bound_read_only_and_no_trial_reaches_the_next():
    task = load_task(TASKS / "q3-revenue-by-region")
    first, said = await trial(task, [call("code_run_python", code=ATTACK), "Done."])
    layout = first.layout
    assert layout.mounted and layout.root == BUILD, layout
    assert "its build bound read-only" in first.setup_notes[0]
    build = Path((await first.mounts(task))[BUILD])
    attacked = re.search(r"changed (\d+) \[\]", said[0])  # the servers' modules and mcp's: none changed
    assert said[0].startswith("exit code 0") and attacked and int(attacked.group(1)) >= 8, said[0]
    before = tree_digest(build)
    assert not any("planted" in p or "sitecustomize" in p for p in before)
    made = {p: (build / p / COMPLETE).stat().st_mtime_ns for p in (f"gateway/{layout.gateway_tag}", layout.scripts)}

    second, said = await trial(task, [call("code_run_python", code=LOOK),
                                      call("sheets_sum_column", path="finance/q3_sales.xlsx", column="Revenue",
                                           group_by="Region"), "Done."])
    assert "[False, False, False]" in said[0], said[0]  # nothing the first trial left
    assert said[1] == "East,209355\nNorth,212595\nSouth,365550\nWest,372435"  # its servers run as they did
    assert tree_digest(build) == before, "a trial changed the build on the host"
    assert {p: (build / p / COMPLETE).stat().st_mtime_ns for p in made} == made, "the build was made again"
    assert second.layout.mounted


async def test_its_bytecode_is_compiled_on_the_host_so_no_trial_compiles():
    task = load_task(TASKS / "q3-revenue-by-region")
    harness = ArchipelagoHarness({})
    build = Path((await harness.mounts(task))[BUILD])
    world = load_world(WORLD)
    box = LocalSandboxProvider().create(sandbox_spec(task, "archipelago-builds").model_copy(
        update={"mounts": {BUILD: build}}))
    await box.start()
    try:
        await harness.setup(box, task)
        layout = harness.layout
        tag = f"cpython-{layout.python.major}{layout.python.minor}"
        if await host_python(layout.python.version, shutil.which("uv") or "uv") is None:
            pytest.skip(f"no CPython {layout.python.version} on this host (`uv python install {layout.python.version}`)")
        record = json.loads((build / "gateway" / layout.gateway_tag / COMPLETE).read_text())
        assert layout.compiled and record["bytecode"] == tag
        compiled = build / "gateway" / layout.gateway_tag / "path" / "servers" / "acme_mcp" / "__pycache__"
        assert (compiled / f"spreadsheets.{tag}.pyc").is_file()
        cache = await box.exec("ls /opt/tackroom-world/pycache 2>&1; true")
        assert "No such file" in cache.stdout  # nothing was compiled inside
    finally:
        await box.stop()
    assert world_version(world) in build.name


def test_the_world_version_follows_what_the_build_holds(tmp_path):
    world_dir = tmp_path / "acme"
    shutil.copytree(WORLD, world_dir, ignore=shutil.ignore_patterns("tasks", "__pycache__"))
    first = world_version(load_world(world_dir))
    assert world_version(load_world(world_dir)) == first
    (world_dir / "files" / "new.txt").write_text("the world's files are uploaded per trial, not built")
    assert world_version(load_world(world_dir)) == first
    server = world_dir / "servers" / "acme_mcp" / "chat.py"
    server.write_text(server.read_text() + "\n# changed\n")
    assert world_version(load_world(world_dir)) != first
    toml = world_dir / "world.toml"
    toml.write_text(toml.read_text().replace('"pypdf>=5"', '"pypdf>=5.1"'))
    assert len({first, world_version(load_world(world_dir))}) == 2


NOTES = '''
import os
from mcp.server.fastmcp import FastMCP

server = FastMCP("hello")


@server.tool()
def note(text: str) -> str:
    """Keep a note beside the server's code (as a server keeps its database)."""
    with open("notes.txt", "a") as f:
        f.write(text + "\\n")
    with open("notes.txt") as f:
        return f.read()


if __name__ == "__main__":
    server.run("stdio")
'''


async def test_a_project_server_writes_beside_its_code_in_a_copy_of_its_own(tmp_path, monkeypatch):
    """Mercor's servers keep a database under their project folder: each trial's server gets the project copied out
    of the read-only build, so a note one trial keeps is gone in the next."""
    monkeypatch.delenv("HELLO_PROJECT", raising=False)
    project = make_project(tmp_path)
    (project / "server" / "main.py").write_text(NOTES)
    task = load_task(make_world(tmp_path, textwrap.dedent("""
        [[servers]]
        name = "hello"
        project = "../hello-project"
        cwd = "server"
        command = ["python", "main.py"]
        """)) / "tasks" / "t")
    options = {"site_cache_dir": str(tmp_path / "cache"), "gateway_startup_timeout_sec": 300}
    first, said = await trial(task, [call("hello_note", text="one"), "Done."], **options)
    assert said == ["one\n"] and first.layout.mounted
    second, said = await trial(task, [call("hello_note", text="two"), "Done."], **options)
    assert said == ["two\n"]
    assert not list((tmp_path / "cache" / "builds").rglob("notes.txt"))


BARRIER_SERVER = '''
import pathlib, sys, tempfile, time
# A server that starts only once its sibling has begun to start: a gateway that starts its
# servers one after another never gets the first one up.
here, sibling = (pathlib.Path(tempfile.gettempdir()) / name for name in sys.argv[1:3])
here.touch()
deadline = time.monotonic() + 60
while not sibling.exists():
    if time.monotonic() > deadline:
        sys.exit(f"{sibling.name} never began to start while {here.name} was starting")
    time.sleep(0.05)
from mcp.server.mcpserver import MCPServer

server = MCPServer("barrier")


@server.tool()
def ping() -> str:
    """Answer."""
    return "pong"


server.run("stdio")
'''


async def test_the_gateway_starts_its_stdio_servers_at_once(tmp_path):
    """Each server waits for the other to begin starting, so only a gateway that starts them together gets both up."""
    token = uuid.uuid4().hex
    world = make_world(tmp_path, textwrap.dedent(f"""
        [runtime]
        pythonpath = ["servers"]

        [[servers]]
        name = "one"
        command = ["python3", "-m", "barrier_server", "{token}-one", "{token}-two"]

        [[servers]]
        name = "two"
        command = ["python3", "-m", "barrier_server", "{token}-two", "{token}-one"]
        """))
    (world / "servers").mkdir()
    (world / "servers" / "barrier_server.py").write_text(BARRIER_SERVER)
    harness, said = await trial(load_task(world / "tasks" / "t"), [call("two_ping"), "Done."])
    assert said == ["pong"], harness.gateway.describe()
    assert harness.gateway.listing["one"].tools == 1 and harness.gateway.listing["two"].tools == 1


def test_builds_no_trial_used_lately_are_pruned_when_a_new_one_is_made(tmp_path):
    """Another version of the same world goes after a day unused, any build after a week; a build in use stays."""
    from tackroom_archipelago.builds import mark_used, prune_builds

    builds = tmp_path / "builds"
    now, day = 1_000_000_000.0, 24 * 3600.0
    ages = {"acme-0000000000000001": 2 * day, "acme-0000000000000002": 0.5 * day, "other-0000000000000003": 3 * day,
            "other-0000000000000004": 8 * day, "acme-2-0000000000000005": 2 * day, "acme-0000000000000009": 0}
    for name, age in ages.items():
        part = builds / name / "gateway" / "site"
        part.mkdir(parents=True)
        (part / "mod.py").write_text("x = 1\n")
        part.chmod(0o555)  # parts are read-only
        mark_used(builds, name)
        os.utime(builds / ".used" / name, (now - age, now - age))
    (builds / "not-a-build").mkdir()
    os.utime(builds / "not-a-build", (now - 30 * day, now - 30 * day))
    removed = prune_builds(builds, "acme-0000000000000009", now=now)
    assert removed == ["acme-0000000000000001", "other-0000000000000004"]
    left = sorted(p.name for p in builds.iterdir())
    assert left == [".used", "acme-0000000000000002", "acme-0000000000000009", "acme-2-0000000000000005",
                    "not-a-build", "other-0000000000000003"]
    assert sorted(p.name for p in (builds / ".used").iterdir()) == sorted(set(ages) - set(removed))


async def test_a_trial_marks_its_build_used(tmp_path):
    from tackroom_archipelago.world import world_build

    world = load_world(WORLD)
    cache = tmp_path / "cache"
    folder = world_build(world, cache)
    marker = cache / "builds" / ".used" / folder.name
    os.utime(marker, (0, 0))
    assert world_build(world, cache) == folder and marker.stat().st_mtime > 0
