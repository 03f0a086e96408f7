"""A task's [world] and [answer] tables: what they say, and every way a task file can get them wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from tackroom import TaskError, load_task
from tackroom_worlds import check_tool_globs, task_answer_path, task_world, task_world_dir

REPO = Path(__file__).resolve().parents[3]
LOOKUP = REPO / "examples" / "worlds" / "lookup" / "heldout"


def make_task(tmp_path: Path, toml: str, *, world: bool = True) -> Path:
    if world:
        (tmp_path / "w" / "files").mkdir(parents=True)
        (tmp_path / "w" / "world.toml").write_text("[world]\nname = 'w'\n")
    task = tmp_path / "t"
    task.mkdir()
    (task / "instruction.md").write_text("find it")
    (task / "task.toml").write_text(toml)
    return task


def test_a_lookup_task_says_its_world_tools_and_answer_path():
    task = load_task(LOOKUP / "tasks" / "find-2-04")
    table = task_world(task)
    assert table is not None and table.mount_files
    assert table.tools_include == ["files_grep", "files_list_directory", "files_read_file"]
    assert task_world_dir(task) == LOOKUP
    assert task_answer_path(task, "/elsewhere.txt") == "/app/answer.txt"  # the task's path wins


def test_without_the_tables_the_harness_defaults_stand(tmp_path):
    task = load_task(make_task(tmp_path, 'version = "1.0"\n', world=False))
    assert task_world(task) is None and task_world_dir(task) is None
    assert task_answer_path(task, "/app/out.txt") == "/app/out.txt"
    assert task_answer_path(task, None) is None


@pytest.mark.parametrize(("toml", "message"), [
    ("[world]\npath = '../w'\ntool_include = ['x']\n",
     r"\[world\] has unknown field\(s\) tool_include; valid fields: path, tools_include, tools_exclude, mount_files"),
    ("[world]\npath = '../w'\ntools_include = []\n", r"world.tools_include: List should have at least 1 item"),
    ("[world]\npath = '../w'\nmount_files = 'maybe'\n", r"world.mount_files: Input should be a valid boolean"),
    ("world = 'w'\n", r"\[world\] must be a table, got str"),
    ("[answer]\npath = 'answer.txt'\n", r"\[answer\] path must be an absolute sandbox path without '..'"),
    ("[answer]\npath = '/app/../etc/passwd'\n", r"\[answer\] path must be an absolute sandbox path"),
    ("[answer]\nfile = '/app/a.txt'\n", r"\[answer\] has unknown field\(s\) file; valid fields: path"),
])
def test_a_wrong_table_is_a_task_error_naming_the_fix(tmp_path, toml, message):
    task = load_task(make_task(tmp_path, toml))
    with pytest.raises(TaskError, match=message) as info:
        task_world(task)
        task_answer_path(task, None)
    assert info.value.error_class == "task" and "task.toml" in str(info.value)


def test_a_world_path_that_is_not_a_folder_is_refused(tmp_path):
    (tmp_path / "w" / "files").mkdir(parents=True)
    (tmp_path / "w" / "world.toml").write_text("")
    task = load_task(make_task(tmp_path, "[world]\npath = '../w'\n", world=False))
    (tmp_path / "w" / "world.toml").unlink()
    (tmp_path / "w" / "files").rmdir()
    (tmp_path / "w").rmdir()
    with pytest.raises(TaskError, match=r"\[world\].path '../w' does not exist"):
        task_world_dir(task)


def test_a_tools_include_glob_that_matches_no_tool_names_the_tools(tmp_path):
    task = load_task(make_task(tmp_path, "[world]\npath = '../w'\ntools_include = ['files_read_*', 'file_grep']\n"))
    tools = ["files_read_file", "files_grep", "files_list_directory"]
    with pytest.raises(TaskError, match=r"tools_include \['file_grep'\] match\(es\) none of the world's tools; "
                                        r"they are: files_grep, files_list_directory, files_read_file"):
        check_tool_globs(task, task_world(task), tools)
    fine = load_task(make_task(tmp_path / "b", "[world]\npath = '../w'\ntools_include = ['files_*']\n"))
    check_tool_globs(fine, task_world(fine), tools)
    check_tool_globs(fine, None, tools)  # a task that names no tools leaves the harness's options alone
