"""The ``file-diff`` verifier: snapshot before and after the agent, grade outputs against ``expected/``."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

import tackroom
from tackroom_file_diff.diff import changes_report
from tackroom_file_diff.documents import ReaderOptions
from tackroom_file_diff.formats import FileFormat, detect_format
from tackroom_file_diff.grading import FileGrade, grade_file
from tackroom_file_diff.report import ReportLimits
from tackroom_file_diff.snapshot import DEFAULT_MAX_FILE_BYTES, Snapshot, take_snapshot
from tackroom_file_diff.task_settings import (
    FileDiffTaskSettings,
    ToleranceOverride,
    expected_files,
    expected_outputs,
    rules_for,
    task_settings,
)
from tackroom_file_diff.tolerance import ToleranceRules


class FileDiffOptions(tackroom.PluginOptions):
    """The ``[verifier]`` section when ``name = "file-diff"``."""

    expected_dir: str = Field(default="expected", description="Task sub-directory mirroring sandbox paths")
    paths: list[str] = Field(
        default_factory=list,
        description="More sandbox paths to watch besides the expected outputs (reported; see forbid_other_changes)",
    )
    tolerance: ToleranceRules = Field(default_factory=ToleranceRules, description="Rules for every file")
    formats: dict[FileFormat, ToleranceOverride] = Field(  # type: ignore[valid-type]
        default_factory=dict, description="Rules per format (csv, xlsx, docx, pdf, json, text, binary)"
    )
    score: Literal["mean", "all_pass"] = Field(
        default="mean", description="Reward: weighted mean of the file components, or 1 only when all are 1"
    )
    forbid_other_changes: bool = Field(
        default=False, description="Add a no_other_changes component: nothing else under the watched paths changed"
    )
    report: ReportLimits = Field(default_factory=ReportLimits)
    reader: ReaderOptions = Field(default_factory=ReaderOptions)
    snapshot_timeout_sec: float = Field(default=120.0, gt=0)
    max_file_bytes: int = Field(default=DEFAULT_MAX_FILE_BYTES, ge=1, description="Bigger files compare by hash")


class GradingPlan(BaseModel):
    """What one task asks of file-diff: the expected files, the paths to snapshot, the task's settings."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    expected: dict[str, Path]
    settings: FileDiffTaskSettings
    paths: list[str]


class FileDiffVerifier(tackroom.Verifier):
    """Diffs output files before/after the agent (text, csv, xlsx, docx, pdf) and grades them against expected/.

    Reward components: ``file:<path>`` per expected file (the fraction of
    cells/lines/paragraphs that match under the tolerance rules),
    ``absent:<path>`` per ``must_not_exist`` path, and ``no_other_changes``
    when ``forbid_other_changes`` is on. ``details`` holds each file's grade
    and the size-capped changes report.
    """

    name = "file-diff"
    Options = FileDiffOptions
    capabilities = frozenset({"snapshot", "changes_report"})

    _plan: GradingPlan | None = None
    _before: Snapshot | None = None

    def plan(self, task: tackroom.Task) -> GradingPlan:
        """Read the task's expected files and settings; :class:`tackroom.TaskError` when there is nothing to grade."""
        settings = task_settings(task)
        expected_dir = settings.expected_dir or self.options.expected_dir
        expected = expected_files(task, expected_dir)
        if not expected and not settings.must_not_exist:
            raise tackroom.TaskError(
                f"{task.path}: the file-diff verifier found no expected files; put each expected output under "
                f"{expected_dir}/ at its sandbox path (e.g. {expected_dir}/app/out.csv for /app/out.csv), "
                "or list paths in [file_diff] must_not_exist"
            )
        paths = {*self.options.paths, *expected_outputs(task), *expected, *settings.must_not_exist}
        return GradingPlan(expected=expected, settings=settings, paths=sorted(paths))

    async def _snapshot(self, sandbox: tackroom.Sandbox, paths: list[str]) -> Snapshot:
        return await take_snapshot(sandbox, paths, timeout=self.options.snapshot_timeout_sec,
                                   max_file_bytes=self.options.max_file_bytes)

    async def prepare(self, task: tackroom.Task, sandbox: tackroom.Sandbox) -> None:
        self._plan = self.plan(task)
        self._before = await self._snapshot(sandbox, self._plan.paths)

    async def verify(self, task: tackroom.Task, sandbox: tackroom.Sandbox,
                     trajectory: tackroom.Trajectory) -> tackroom.Reward:
        plan = self._plan or self.plan(task)
        after = await self._snapshot(sandbox, plan.paths)
        before = self._before or Snapshot(
            paths=plan.paths, notes=["no snapshot before the agent ran (prepare was not called): every file is 'added'"]
        )
        report = changes_report(before, after, limits=self.options.report, reader=self.options.reader)
        grades: list[FileGrade] = []
        components: dict[str, float] = {}
        for path, local in plan.expected.items():
            grade = self._grade(path, local, after, plan.settings)
            grades.append(grade)
            components[f"file:{path}"] = grade.score
        for path in plan.settings.must_not_exist:
            present = any(p == path or p.startswith(path.rstrip("/") + "/") for p in after.files)
            components[f"absent:{path}"] = 0.0 if present else 1.0
        other: list[str] = []
        if self.options.forbid_other_changes:
            graded = set(plan.expected) | set(plan.settings.must_not_exist)
            other = [p for p in report.added + report.removed + report.modified if p not in graded]
            components["no_other_changes"] = 0.0 if other else 1.0
        weights = {key: plan.settings.weights.get(key.split(":", 1)[-1], 1.0) for key in components}
        if self.options.score == "all_pass":
            score = float(all(v == 1.0 for v in components.values()))
        else:
            total = sum(weights.values())
            score = sum(components[k] * weights[k] for k in components) / total if total else 0.0
        return tackroom.Reward(
            score=score,
            components=components,
            details={
                "score_mode": self.options.score,
                "grades": [g.model_dump(mode="json") for g in grades],
                "other_changes": other[:100],
                "changes": report.model_dump(mode="json", exclude={"limits"}),
            },
        )

    def _grade(self, path: str, local: Path, after: Snapshot, settings: FileDiffTaskSettings) -> FileGrade:
        expected = local.read_bytes()
        fmt = detect_format(path, expected)
        rules = rules_for(path, fmt, self.options.tolerance, self.options.formats, settings)
        actual = after.files.get(path)
        if actual is not None and actual.data is None:
            # Over the size limit: only the hash is known.
            same = hashlib.sha256(expected).hexdigest() == actual.sha256
            return FileGrade(path=path, format=fmt, status="match" if same else "mismatch", score=float(same),
                             matched=int(same), total=1, rules=rules,
                             notes=[f"{actual.size} bytes, over max_file_bytes: compared by hash"])
        return grade_file(path, actual.data if actual else None, expected, rules, self.options.reader)
