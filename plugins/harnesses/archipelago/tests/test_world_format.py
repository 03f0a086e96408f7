"""world.toml: the example world loads; broken worlds fail with typed errors that say what to fix."""

from __future__ import annotations

import pytest
from archipelago_paths import TASKS, WORLD

from tackroom import TaskError, load_task
from tackroom.testing import check_registered
from tackroom_archipelago import ArchipelagoHarness, load_world, task_world_dir
from tackroom_archipelago.errors import WorldFormatError, WorldRuntimeError
from tackroom_archipelago.tools import call_arguments, hoist
from tackroom_archipelago.world import SandboxPython, probe_python


def test_registered_as_a_plugin():
    check_registered("harness", "archipelago", distribution="tackroom-archipelago")
    assert ArchipelagoHarness.capabilities == {"token_ids", "needs_policy"}


def test_the_example_world_loads():
    world = load_world(WORLD)
    assert world.name == "acme" and world.files.mount == "/workspace"
    assert [s.name for s in world.servers] == ["files", "sheets", "docs", "pdf", "mail", "chat", "code"]


def test_a_task_names_its_world_in_a_table_this_harness_reads(tmp_path):
    assert task_world_dir(load_task(TASKS / "q3-revenue-by-region")) == WORLD
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "instruction.md").write_text("do it")
    assert task_world_dir(load_task(plain)) is None
    (plain / "task.toml").write_text("[world]\npath = 3\n")
    with pytest.raises(TaskError, match=r"task.toml: world.path: Input should be a valid string \(the \[world\] "
                                        r"table is read by the tackroom-worlds plugin\)"):
        task_world_dir(load_task(plain))


@pytest.mark.parametrize(("toml", "message"), [
    (None, "missing; a world directory needs a world.toml"),
    ("[world]\nname = 'x'\n", "servers: Field required"),
    ("[world]\nname='x'\n[[servers]]\nname='a'\n", "give exactly one of `module`"),
    ("[world]\nname='x'\n[[servers]]\nname='a'\nmodule='m'\n[[servers]]\nname='a'\nmodule='n'\n", "must be unique"),
    ("[world]\nname='x'\n[files]\nsource='nope'\n[[servers]]\nname='a'\nmodule='m'\n", "is not a directory"),
])
def test_broken_worlds_name_the_problem(tmp_path, toml, message):
    (tmp_path / "files").mkdir()
    if toml is not None:
        (tmp_path / "world.toml").write_text(toml)
    with pytest.raises(WorldFormatError, match=message) as info:
        load_world(tmp_path)
    assert info.value.error_class == "task"


async def test_a_sandbox_without_python_is_a_task_error(sandbox):
    with pytest.raises(WorldRuntimeError, match="use an image with python3") as info:
        await probe_python(sandbox, "python3.99")
    assert isinstance(info.value, TaskError)
    found = await probe_python(sandbox, "python3")
    assert found.major == 3 and found.uv_platform.startswith(found.machine)


def test_uv_platform_follows_the_libc():
    glibc = SandboxPython(executable="python3", major=3, minor=11, machine="x86_64", libc="glibc", libc_version="2.36")
    musl = glibc.model_copy(update={"libc": "musl"})
    assert (glibc.uv_platform, musl.uv_platform) == ("x86_64-manylinux_2_36", "x86_64-unknown-linux-musl")


def test_single_envelope_schemas_are_hoisted_and_calls_rewrapped():
    schema = {"type": "object", "required": ["request"], "properties": {"request": {"$ref": "#/$defs/Req"}},
              "$defs": {"Req": {"type": "object", "title": "Req", "required": ["code"],
                                "properties": {"code": {"type": "string", "title": "Code"}}}}}
    flat, key = hoist(schema)
    assert key == "request" and flat == {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}
    assert call_arguments("run", '{"code": "1"}', {"run": "request"}) == {"request": {"code": "1"}}
    assert call_arguments("run", '{"request": {"code": "1"}}', {"run": "request"}) == {"request": {"code": "1"}}
    assert hoist({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})[1] is None
    with pytest.raises(ValueError, match="not valid JSON"):
        call_arguments("run", "{oops", {})


async def test_a_task_without_a_world_is_rejected(sandbox, tmp_path):
    from tackroom import load_task

    (tmp_path / "instruction.md").write_text("do it")
    with pytest.raises(TaskError, match=r"add \[world\] path"):
        await ArchipelagoHarness().setup(sandbox, load_task(tmp_path))
