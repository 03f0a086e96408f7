"""From per-criterion verdicts to a reward: weighted ``mean`` and APEX-style ``all_pass``, with penalties."""

from __future__ import annotations

from pydantic import BaseModel, Field

import tackroom
from tackroom_rubric_judge.client import CallRecord
from tackroom_rubric_judge.rubric import task_rubric


class Criterion(BaseModel):
    """A rubric criterion with its resolved id and sign."""

    id: str
    criterion: str
    weight: float
    penalty: bool

    @property
    def magnitude(self) -> float:
        return abs(self.weight)


class CriterionResult(BaseModel):
    """The judge's verdict on one criterion. ``passed`` means the criterion *holds* (for a penalty: the mistake happened)."""

    id: str
    criterion: str
    weight: float
    penalty: bool
    passed: bool
    rationale: str
    call: CallRecord = Field(default_factory=CallRecord)


class RubricScore(BaseModel):
    """``mean``: positive weight earned minus penalty weight incurred, over the positive weight, clipped to [0, 1]
    (a rubric of penalties only: 1 minus the share of penalty weight incurred). ``all_pass``: 1 when every
    positive criterion holds and no penalty does (APEX-Agents Pass@1), else 0."""

    mean: float
    all_pass: float
    components: dict[str, float]


def rubric_criteria(task: tackroom.Task) -> list[Criterion]:
    """The task's rubric with ids (``c1``, ``c2`` … where none is given); :class:`tackroom.TaskError` when unusable."""
    rubric = task_rubric(task)
    if not rubric:
        raise tackroom.TaskError(
            f"{task.path}: the rubric-judge verifier needs a rubric; add [[rubric]] tables "
            '(criterion = "...", weight = 1.0) to task.toml or a rubric.json list'
        )
    criteria: list[Criterion] = []
    seen: set[str] = set()
    for i, item in enumerate(rubric, start=1):
        cid = item.id or f"c{i}"
        if cid in seen:
            raise tackroom.TaskError(f"{task.path}: rubric id {cid!r} is used twice; give each criterion its own id")
        seen.add(cid)
        if not item.criterion.strip():
            raise tackroom.TaskError(f"{task.path}: rubric criterion {cid!r} is empty")
        criteria.append(Criterion(id=cid, criterion=item.criterion, weight=item.weight, penalty=item.is_penalty))
    if not any(c.magnitude > 0 for c in criteria):
        raise tackroom.TaskError(f"{task.path}: every rubric weight is 0; nothing can be scored")
    return criteria


def score(results: list[CriterionResult]) -> RubricScore:
    positive = [r for r in results if not r.penalty]
    penalties = [r for r in results if r.penalty]
    earned = sum(abs(r.weight) for r in positive if r.passed)
    possible = sum(abs(r.weight) for r in positive)
    incurred = sum(abs(r.weight) for r in penalties if r.passed)
    if possible > 0:
        mean = (earned - incurred) / possible
    else:
        mean = 1.0 - incurred / sum(abs(r.weight) for r in penalties)
    mean = min(1.0, max(0.0, mean))
    all_pass = float(all(r.passed for r in positive) and not any(r.passed for r in penalties))
    components = {f"{'penalty' if r.penalty else 'criterion'}:{r.id}": float(r.passed) for r in results}
    components["mean"] = mean
    components["all_pass"] = all_pass
    return RubricScore(mean=mean, all_pass=all_pass, components=components)
