"""tackroom-worlds: what a task says about its world, its tools and its answer, read alike by every harness.

Not a plugin (it registers nothing): a library the harnesses depend on.

- :func:`task_world`, :func:`task_world_dir`: the task's ``[world]`` table (``path``, ``tools_include``,
  ``tools_exclude``, ``mount_files``) and the world directory it names;
- :func:`task_answer_path`: the task's ``[answer] path``, else the harness's default;
- :func:`world_files`, :func:`mount_world_files`: world.toml's ``[files]`` and their upload into any sandbox,
  so terminus and opencode see the same data archipelago's servers serve; :func:`world_mount`: where they go.
"""

from tackroom_worlds.files import FilesSpec, WorldFiles, mount_world_files, world_files, world_mount
from tackroom_worlds.task_tables import (
    AnswerTable,
    WorldTable,
    check_tool_globs,
    read_table,
    task_answer_path,
    task_world,
    task_world_dir,
)

__all__ = [
    "AnswerTable",
    "FilesSpec",
    "WorldFiles",
    "WorldTable",
    "check_tool_globs",
    "mount_world_files",
    "read_table",
    "task_answer_path",
    "task_world",
    "task_world_dir",
    "world_files",
    "world_mount",
]
