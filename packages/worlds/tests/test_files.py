"""A world's files in any sandbox: world.toml's [files] read, checked, and uploaded to the mount."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tackroom import TaskError, load_task
from tackroom_app import sandbox_spec
from tackroom_local import LocalSandboxProvider
from tackroom_worlds import mount_world_files, world_files

REPO = Path(__file__).resolve().parents[3]
LOOKUP = REPO / "examples" / "worlds" / "lookup" / "heldout"


def world(tmp_path: Path, toml: str) -> Path:
    (tmp_path / "files").mkdir(exist_ok=True)
    (tmp_path / "files" / "a.txt").write_text("A1B2C3\n")
    (tmp_path / "world.toml").write_text(toml)
    return tmp_path


def test_the_lookup_world_files_and_mount():
    files = world_files(LOOKUP)
    assert files.source == LOOKUP / "files" and files.mount == "/workspace"
    assert (files.source / "inventory.csv").is_file()


@pytest.mark.parametrize(("toml", "message"), [
    (None, "missing; a world directory needs a world.toml"),
    ("[files\n", "invalid TOML"),
    ("[files]\nmount = 'workspace'\n", "files.mount must be an absolute sandbox path"),
    ("[files]\nmount = '/a/../etc'\n", "files.mount must be an absolute sandbox path"),
    ("[files]\nmount = '/workspace,/root'\n", "files.mount must be one folder, without commas"),
    ("[files]\nsorce = 'files'\n", r"files.sorce: unknown field \(valid fields of \[files\]: source, mount\)"),
    ("[files]\nsource = '../..'\n", r"files.source '../..' is not a folder inside the world"),
    ("[files]\nsource = 'nope'\n", r"files.source 'nope' is not a folder inside the world"),
])
def test_a_broken_world_files_table_is_a_task_error(tmp_path, toml, message):
    root = world(tmp_path, toml or "")
    if toml is None:
        (root / "world.toml").unlink()
    with pytest.raises(TaskError, match=message):
        world_files(root)


def test_a_link_out_of_the_world_files_is_refused(tmp_path):
    root = world(tmp_path, "")
    os.symlink("/etc/passwd", root / "files" / "passwd")
    with pytest.raises(TaskError, match="points outside the world's files"):
        world_files(root)
    (root / "files" / "passwd").unlink()
    os.symlink("a.txt", root / "files" / "b.txt")  # inside: fine
    assert world_files(root).source == root / "files"


async def _sandbox_for(task_dir: Path):
    box = LocalSandboxProvider().create(sandbox_spec(load_task(task_dir), f"worlds-test-{os.getpid()}"))
    await box.start()
    return box


async def test_mounting_puts_the_world_files_where_the_instruction_says():
    task = load_task(LOOKUP / "tasks" / "read-2-00")
    box = await _sandbox_for(task.path)
    try:
        note = await mount_world_files(box, task)
        assert note == "world files of 'heldout' mounted at /workspace"
        listed = await box.exec("cat /workspace/notes/*.txt | wc -l; head -1 /workspace/inventory.csv")
        assert listed.ok and listed.stdout.split() == ["5", "item,code,qty"]
    finally:
        await box.stop()


async def test_no_world_or_mount_files_off_mounts_nothing(tmp_path):
    (tmp_path / "w" / "files").mkdir(parents=True)
    (tmp_path / "w" / "files" / "x.txt").write_text("x")
    (tmp_path / "w" / "world.toml").write_text("")
    for name, toml in [("off", "[world]\npath = '../w'\nmount_files = false\n"), ("none", "")]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "instruction.md").write_text("x")
        (tmp_path / name / "task.toml").write_text(toml)
        task = load_task(tmp_path / name)
        box = await _sandbox_for(task.path)
        try:
            assert await mount_world_files(box, task) is None
            assert not (await box.exec("test -e /workspace/x.txt")).ok
        finally:
            await box.stop()
