"""Plugin-owned task tables: core keeps every table it does not read; the owning plugin validates its own."""

from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

import tackroom


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    steps: int
    names: list[str] = []


def load(root: Path, toml: str) -> tackroom.Task:
    d = root / "t"
    d.mkdir()
    (d / "instruction.md").write_text("do it")
    (d / "task.toml").write_text(toml)
    return tackroom.load_task(d)


def test_a_plugin_table_is_kept_and_validated_with_the_plugins_model(tmp_path):
    task = load(tmp_path, '[agent]\ntimeout_sec = 5\n[limits]\nsteps = 3\nnames = ["a"]\n[[checks]]\nn = 1\n')
    assert set(task.config.tables) == {"limits", "checks"}  # core's own sections are not among them
    assert task.section("limits", Limits, owner="limiter") == Limits(steps=3, names=["a"])
    assert task.section("checks", list[dict[str, int]], owner="checker") == [{"n": 1}]
    assert task.section("absent", Limits, owner="limiter") is None


def test_a_table_the_plugin_refuses_names_the_file_the_field_and_the_plugin(tmp_path):
    task = load(tmp_path, '[limits]\nsteps = "many"\ncolour = "red"\n')  # loading never reads a plugin's table
    with pytest.raises(tackroom.TaskError) as caught:
        task.section("limits", Limits, owner="limiter")
    message = str(caught.value)
    assert message.startswith(f"{task.path / 'task.toml'}: ")
    assert "limits.steps: Input should be a valid integer" in message and "limits.colour: unknown field" in message
    assert message.endswith("(the [limits] table is read by the limiter plugin)")
