"""Project servers (``[[servers]] project = ...``): each a uv project with its own Python and packages.

The fast tests read worlds; the local-sandbox tests build a real project server whose pins clash with the
gateway's (``mcp<2`` beside the gateway's ``mcp>=2.3``, the FastMCP 3.3 situation) and run it over stdio,
and show a missing Python failing with a message that names it. Mercor's own servers run in
test_mercor_world.py (docker, Python 3.13).
"""

from __future__ import annotations

import platform
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from archipelago_scripted_engine import ScriptedEngine, call

from tackroom import Policy, load_task
from tackroom_app import sandbox_spec
from tackroom_archipelago import ArchipelagoHarness
from tackroom_archipelago.errors import McpGatewayError, WorldBuildError, WorldFormatError, WorldRuntimeError
from tackroom_archipelago.projects import expand_path, python_candidates, read_project
from tackroom_archipelago.world import (
    SandboxPython,
    build_project_site,
    gateway_server_config,
    install_world,
    load_world,
)
from tackroom_local import LocalSandboxProvider

SERVER = '''
import os
from importlib.metadata import version
from mcp.server.fastmcp import FastMCP   # mcp 1.x's FastMCP: this project pins mcp<2
import greeting                         # a vendored local package ([tool.uv.sources])

server = FastMCP("hello")


@server.tool()
def hello(who: str) -> str:
    """Greet someone."""
    return f"{greeting.greet(who)} from mcp {version('mcp')} root={os.environ.get('GREETING_ROOT')}"


if __name__ == "__main__":
    server.run("stdio")
'''


def make_project(root: Path, *, requires: str = ">=3.10", deps: str = '"mcp>=1.20,<2", "greeting"') -> Path:
    project = root / "hello-project"
    (project / "server").mkdir(parents=True)
    (project / "server" / "main.py").write_text(SERVER)
    (project / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [project]
        name = "hello-server"
        version = "0.1.0"
        requires-python = "{requires}"
        dependencies = [{deps}]

        [tool.uv.sources]
        greeting = {{ path = "packages/greeting" }}
        """))
    pkg = project / "packages" / "greeting"
    (pkg / "greeting").mkdir(parents=True)
    (pkg / "greeting" / "__init__.py").write_text("def greet(name):\n    return f'hello {name}'\n")
    (pkg / "pyproject.toml").write_text(textwrap.dedent("""\
        [project]
        name = "greeting"
        version = "1.0"
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"
        """))
    return project


def make_world(root: Path, server: str) -> Path:
    world = root / "world"
    (world / "files").mkdir(parents=True)
    (world / "files" / "note.txt").write_text("hi\n")
    (world / "world.toml").write_text(textwrap.dedent("""\
        [world]
        name = "projects"
        [files]
        mount = "/workspace"
        """) + server)
    task = world / "tasks" / "t"
    task.mkdir(parents=True)
    (task / "task.toml").write_text('version = "1.0"\n[world]\npath = "../.."\n')
    (task / "instruction.md").write_text("Say hello to Ada.\n")
    return world


HELLO = """
[[servers]]
name = "hello"
project = "${HELLO_PROJECT:-../hello-project}"
cwd = "server"
command = ["python", "main.py"]
env = { GREETING_ROOT = "/workspace" }
"""


# -- reading a world --------------------------------------------------------------------------------
def test_project_path_expands_variables_with_defaults(tmp_path, monkeypatch):
    monkeypatch.delenv("HELLO_PROJECT", raising=False)
    assert expand_path("${HELLO_PROJECT:-a/b}/c", tmp_path, where="x") == tmp_path / "a" / "b" / "c"
    monkeypatch.setenv("HELLO_PROJECT", "/elsewhere")
    assert expand_path("${HELLO_PROJECT:-a/b}/c", tmp_path, where="x") == Path("/elsewhere/c")
    monkeypatch.delenv("HELLO_PROJECT")
    with pytest.raises(WorldFormatError, match=r"\$\{HELLO_PROJECT\} is not set"):
        expand_path("${HELLO_PROJECT}/c", tmp_path, where="x")


def test_a_project_server_loads_with_its_pyproject(tmp_path, monkeypatch):
    monkeypatch.delenv("HELLO_PROJECT", raising=False)
    make_project(tmp_path)
    world = load_world(make_world(tmp_path, HELLO))
    project = world.projects["hello"]
    assert project.name == "hello-server" and project.requires_python == ">=3.10"
    assert project.sources == [tmp_path / "hello-project" / "packages" / "greeting"]
    assert python_candidates(project.specifier)[:2] == ["python3.20", "python3.19"]
    assert python_candidates(make_specifier(">=3.13,<3.14")) == ["python3.13", "python3"]


def make_specifier(text: str):
    from packaging.specifiers import SpecifierSet

    return SpecifierSet(text)


@pytest.mark.parametrize(("server", "message"), [
    (HELLO.replace("../hello-project", "../nowhere"), "is not a directory"),
    (HELLO.replace('cwd = "server"', 'cwd = "../../etc"'), "is not a folder inside the project"),
    (HELLO.replace('command = ["python", "main.py"]\n', ""), "a `project` server needs a `command`"),
    (HELLO.replace('project = "${HELLO_PROJECT:-../hello-project}"', 'command = ["x"]\npython = "python3"')
     .replace('command = ["python", "main.py"]\n', ""), "`python` applies to a `project` server only"),
    (HELLO.replace("${HELLO_PROJECT:-../hello-project}", "${HELLO_PROJECT}"), r"\$\{HELLO_PROJECT\} is not set"),
], ids=["missing-folder", "cwd-outside", "no-command", "python-without-project", "unset-variable"])
def test_project_server_errors_name_the_fix(tmp_path, monkeypatch, server, message):
    monkeypatch.delenv("HELLO_PROJECT", raising=False)
    make_project(tmp_path)
    with pytest.raises(WorldFormatError, match=message):
        load_world(make_world(tmp_path, server))


def test_a_project_without_pyproject_or_with_a_bad_one_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("HELLO_PROJECT", raising=False)
    project = make_project(tmp_path)
    world = make_world(tmp_path, HELLO)
    (project / "pyproject.toml").write_text('[project]\nname = "x"\nrequires-python = "three"\n')
    with pytest.raises(WorldFormatError, match="requires-python 'three' is not a version specifier"):
        load_world(world)
    (project / "pyproject.toml").write_text("[project\n")
    with pytest.raises(WorldFormatError, match="invalid TOML"):
        load_world(world)
    (project / "pyproject.toml").unlink()
    with pytest.raises(WorldFormatError, match="has no pyproject.toml"):
        load_world(world)


# -- in a local sandbox -------------------------------------------------------------------------------
async def test_a_project_server_runs_on_its_own_packages_beside_the_gateway(tmp_path, monkeypatch):
    """The project pins mcp<2 (as FastMCP 3.3 does); the gateway runs mcp>=2.3: each gets its own site."""
    monkeypatch.delenv("HELLO_PROJECT", raising=False)
    make_project(tmp_path)
    task = load_task(make_world(tmp_path, HELLO) / "tasks" / "t")
    box = LocalSandboxProvider().create(sandbox_spec(task, "archipelago-projects"))
    await box.start()
    try:
        harness = ArchipelagoHarness({"max_steps": 3, "site_cache_dir": str(tmp_path / "cache"),
                                      "gateway_startup_timeout_sec": 300})
        await harness.setup(box, task)
        assert harness.gateway.listing["hello"].tools == 1 and harness.gateway.listing["hello"].seconds > 0
        assert "hello: 1 tools in" in harness.setup_notes[0]
        # this sandbox binds no mounts (none were asked for): the world's build was uploaded beside the gateway
        layout = harness.layout
        assert not layout.mounted and layout.root == "/opt/tackroom-world/build"
        part = f"/opt/tackroom-world/build/servers/hello/{layout.server_tags['hello']}"
        config = gateway_server_config(harness.world, harness.world.servers[0], layout)
        assert config["env"]["PYTHONPATH"] == f"{part}/site"
        assert config["cwd"] == f"{part}/project/server" and "copy" not in config
        assert config["command"][0] == harness.world.interpreters["hello"].executable
        script = [call("hello_hello", who="Ada"), "Done."]
        async with ScriptedEngine(script) as engine:
            traj = await harness.run(task, box, Policy(base_url=engine.url, model="scripted"))
        reply = next(m for m in traj.messages if m["role"] == "tool")["content"]
        assert reply.startswith("hello Ada from mcp 1.") and "root=/workspace" in reply, reply
        # the gateway's own site has mcp 2.x: the two environments never met
        gateway_mcp = await box.exec(["sh", "-c", f"ls {layout.gateway_dir}/site | grep -E '^mcp-[0-9]'"], timeout=30)
        assert gateway_mcp.stdout.startswith("mcp-2."), gateway_mcp.stdout
        # the project's site is cached on the host, keyed by its pyproject and vendored files
        cached = list((tmp_path / "cache").iterdir())
        assert any(p.name.startswith("hello-server-py") for p in cached), cached
        # the vendored package was built from a copy: the checkout (maybe shared, read-only) is left as it was
        leftovers = [p.name for p in (tmp_path / "hello-project" / "packages" / "greeting").iterdir()]
        assert sorted(leftovers) == ["greeting", "pyproject.toml"], leftovers
    finally:
        await box.stop()


async def test_a_server_whose_python_the_sandbox_lacks_fails_naming_it(tmp_path, monkeypatch, sandbox):
    monkeypatch.delenv("HELLO_PROJECT", raising=False)
    make_project(tmp_path, requires=">=3.99")
    world = load_world(make_world(tmp_path, HELLO))
    with pytest.raises(WorldRuntimeError) as err:
        await install_world(sandbox, world, base="/opt/tackroom-world", cache_dir=tmp_path / "cache")
    message = str(err.value)
    assert "server 'hello' (project hello-server" in message and "needs Python >=3.99" in message
    assert "the sandbox has python3 = Python 3." in message and "python:3.13-slim-bookworm" in message


async def test_a_named_python_that_is_absent_fails_naming_it(tmp_path, monkeypatch, sandbox):
    monkeypatch.delenv("HELLO_PROJECT", raising=False)
    make_project(tmp_path)
    world = load_world(make_world(tmp_path, HELLO.replace('cwd = "server"', 'cwd = "server"\npython = "python3.77"')))
    with pytest.raises(WorldRuntimeError, match=r"tried python3\.77"):
        await install_world(sandbox, world, base="/opt/tackroom-world", cache_dir=tmp_path / "cache")


DIES_AT_START = """
[[servers]]
name = "broken"
command = ["python3", "-c", "import sys; print('loading the renderer', file=sys.stderr); raise ImportError('libGLfake.so.1: cannot open shared object file: No such file or directory')"]
"""


async def setup_error(tmp_path: Path, world: str, expected: type[Exception], *, startup_timeout_sec: int) -> str:
    """The message of the ``expected`` error the archipelago's setup raises for a one-task world of ``world``."""
    task = load_task(make_world(tmp_path, world) / "tasks" / "t")
    box = LocalSandboxProvider().create(sandbox_spec(task, "archipelago-projects"))
    await box.start()
    try:
        harness = ArchipelagoHarness({"max_steps": 3, "gateway_startup_timeout_sec": startup_timeout_sec})
        with pytest.raises(expected) as err:
            await harness.setup(box, task)
    finally:
        await box.stop()
    return str(err.value)


async def test_a_server_that_dies_at_start_is_named_with_its_own_last_words(tmp_path):
    """A server that exits before listing its tools (a slim image without a library it loads, Mercor's code server
    without its sandbox library) fails setup with an error naming it, quoting its own stderr and saying what is
    missing, not the gateway's traceback."""
    message = await setup_error(tmp_path, DIES_AT_START, WorldRuntimeError, startup_timeout_sec=120)
    assert "server 'broken' (python3 -c import sys;" in message and "stopped before it listed its tools" in message
    assert "The sandbox image lacks the system library libGLfake.so.1" in message and "apt-get install" in message
    assert "loading the renderer" in message and "/opt/tackroom-world/servers/broken.log" in message
    assert "Traceback" not in message.split("world gateway: server 'broken'")[1].split("Its last output")[0]


NEVER_LISTS = """
[[servers]]
name = "slow"
command = ["python3", "-c", "import sys, time; print('warming up the index', file=sys.stderr, flush=True); time.sleep(600)"]
"""


async def test_a_server_still_starting_at_the_deadline_is_quoted_in_the_timeout(tmp_path):
    """A server that never lists its tools (an index it builds, a network it waits for) ends setup at the
    startup deadline, never hangs it; the error quotes the server's own log and names the setting to raise."""
    message = await setup_error(tmp_path, NEVER_LISTS, McpGatewayError, startup_timeout_sec=8)
    assert "did not answer /health within 8s" in message and "startup_timeout_sec gives it longer" in message
    assert "starting server 'slow'" in message and "--- /opt/tackroom-world/servers/slow.log ---" in message
    assert "warming up the index" in message


# -- how a project's site is built ------------------------------------------------------------------------
HOST_PYTHON = SandboxPython(executable=sys.executable, major=sys.version_info[0], minor=sys.version_info[1],
                            machine=platform.machine(), libc="glibc", libc_version=platform.libc_ver()[1] or "2.17")


def installed(site: Path, name: str) -> str:
    [dist] = [p.name for p in site.glob("*.dist-info") if re.fullmatch(rf"{name}-[^-]+\.dist-info", p.name)]
    return dist.removeprefix(f"{name}-").removesuffix(".dist-info")


def uv(*args: str, cwd: Path) -> None:
    from tackroom_archipelago.world import _uv_binary

    subprocess.run([_uv_binary(), *args], cwd=cwd, check=True, capture_output=True, timeout=300)


async def test_a_locked_project_gets_the_locks_versions_and_an_unlocked_one_the_newest(tmp_path):
    """Mercor's projects carry a uv.lock (FastMCP 3.2.4 where ``fastmcp>=2.12.4`` now resolves to 4.x, whose
    modules moved: the spreadsheets, edgar_sec and fmp servers die on import with the newest). A lock's versions
    are installed; without one uv resolves afresh."""
    project = make_project(tmp_path)
    uv("lock", "--quiet", "--exclude-newer", "2025-11-01T00:00:00Z", cwd=project)  # a lock that is not the newest
    locked_mcp = re.search(r'name = "mcp"\nversion = "([^"]+)"', (project / "uv.lock").read_text()).group(1)
    site = await build_project_site(read_project(project, where="t"), HOST_PYTHON, tmp_path / "cache")
    assert installed(site, "mcp") == locked_mcp
    assert (site / "greeting" / "__init__.py").is_file()  # the vendored path source, installed from the lock
    assert (project / "uv.lock").read_text().count("[[package]]") > 5 and not (project / "build").exists()

    (project / "uv.lock").unlink()
    fresh = await build_project_site(read_project(project, where="t"), HOST_PYTHON, tmp_path / "cache")
    assert fresh != site and installed(fresh, "mcp") != locked_mcp  # the newest 1.x, released after the lock


async def test_a_project_that_is_a_package_is_installed_with_its_extras(tmp_path):
    """A project with a [build-system] is installed itself, as uv sync does (Mercor's fmp server imports
    ``mcp_servers.fmp_server.models`` by its full name from a subfolder); every extra comes too (``uv sync
    --all-extras``, as Mercor's image builds them); a change to the project's files is a new site."""
    project = make_project(tmp_path, deps='"greeting"')
    text = (project / "pyproject.toml").read_text()
    (project / "pyproject.toml").write_text(text.replace("[tool.uv.sources]", textwrap.dedent("""\
        [project.optional-dependencies]
        colors = ["colorama"]

        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [tool.setuptools]
        packages = ["hello_pkg"]

        [tool.uv.sources]""")))
    (project / "hello_pkg").mkdir()
    (project / "hello_pkg" / "__init__.py").write_text("VERSION = 1\n")
    read = read_project(project, where="t")
    assert read.package and read.lock is None
    site = await build_project_site(read, HOST_PYTHON, tmp_path / "cache")
    assert (site / "hello_pkg" / "__init__.py").read_text() == "VERSION = 1\n"
    assert installed(site, "colorama") and installed(site, "greeting") == "1.0"
    uv("lock", "--quiet", cwd=project)
    locked = await build_project_site(read_project(project, where="t"), HOST_PYTHON, tmp_path / "cache")
    assert (locked / "hello_pkg" / "__init__.py").is_file() and installed(locked, "colorama")
    (project / "hello_pkg" / "__init__.py").write_text("VERSION = 2\n")
    changed = await build_project_site(read_project(project, where="t"), HOST_PYTHON, tmp_path / "cache")
    assert changed != locked and (changed / "hello_pkg" / "__init__.py").read_text() == "VERSION = 2\n"


async def test_a_lock_uv_cannot_read_fails_naming_it(tmp_path):
    project = make_project(tmp_path)
    (project / "uv.lock").write_text("version = 1\n[[package]]\nname = 3\n")
    with pytest.raises(WorldBuildError, match=r"could not export the uv.lock of project hello-server") as err:
        await build_project_site(read_project(project, where="t"), HOST_PYTHON, tmp_path / "cache")
    assert "`uv lock` there rewrites the lock, or delete it" in str(err.value)
    assert not list((tmp_path / "cache").glob("hello-server-*"))  # nothing half-built is left to be reused
