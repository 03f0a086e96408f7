"""The task's rubric: ``[[rubric]]`` tables in task.toml, or a ``rubric.json`` list beside it.

The rubric belongs to this plugin: core keeps the table as written and :func:`task_rubric` validates it
with :class:`RubricCriterion`, so a bad rubric is reported in this plugin's words.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

import tackroom

PLUGIN = "rubric-judge"
RUBRIC_JSON = "rubric.json"


class RubricCriterion(BaseModel):
    """One gradable criterion; ``weight`` scales its share of the rubric score.

    A *penalty* criterion describes a mistake (``"The agent deleted the input
    file"``): when it holds, its weight is taken off the score. Mark one with
    ``penalty = true`` or a negative ``weight``.
    """

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    criterion: str
    weight: float = 1.0
    penalty: bool = False

    @property
    def is_penalty(self) -> bool:
        return self.penalty or self.weight < 0


Rubric = list[RubricCriterion]
_RUBRIC = TypeAdapter(Rubric)


def task_rubric(task: tackroom.Task) -> Rubric:
    """The task's criteria as written (``[[rubric]]`` wins over ``rubric.json``; empty when it has neither);
    :class:`tackroom.TaskError` naming the file and the field when one does not validate."""
    table = task.section("rubric", Rubric, owner=PLUGIN)
    if table is not None:
        return table
    path = task.path / RUBRIC_JSON
    if not path.is_file():
        return []
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise tackroom.TaskError(f"{path}: invalid JSON: {exc}") from exc
    try:
        return _RUBRIC.validate_python(raw)
    except ValidationError as exc:
        problems = "; ".join(f"rubric[{e['loc'][0]}]{''.join('.' + str(p) for p in e['loc'][1:])}: {e['msg']}"
                             for e in exc.errors())
        raise tackroom.TaskError(f"{path}: {problems} (the rubric is read by the {PLUGIN} plugin)") from exc
