"""tackroom-file-diff: what an agent changed in its files, and how close it came to the expected ones.

Public API (other verifiers import these)::

    from tackroom_file_diff import take_snapshot, changes_report, FileChangeTracker

- :func:`take_snapshot` / :class:`Snapshot`: the files under sandbox paths.
- :func:`changes_report` / :class:`ChangesReport`: added/removed/modified files
  with unified diffs (text, json, pdf text), cell changes (csv, xlsx) and
  paragraph changes (docx); size-capped; ``to_text(max_chars)`` for prompts.
- :class:`FileChangeTracker`: the two snapshots and the report in two calls.
- :func:`expected_outputs`: the sandbox paths a task lists in ``expected_outputs`` (this plugin's key).
- :func:`grade_file` / :class:`ToleranceRules`: one output against its expected file.
- :class:`FileDiffVerifier`: the ``file-diff`` verifier plugin.
"""

from tackroom_file_diff.diff import changes_report, describe_change
from tackroom_file_diff.documents import (
    BinaryDocument,
    Cell,
    ReaderOptions,
    TableDocument,
    TextDocument,
    read_document,
)
from tackroom_file_diff.formats import FORMATS, FileFormat, detect_format
from tackroom_file_diff.grading import FileGrade, Mismatch, grade_file
from tackroom_file_diff.report import CellChange, ChangesReport, FileChange, ParagraphChange, ReportLimits
from tackroom_file_diff.snapshot import Snapshot, SnapshotFile, take_snapshot
from tackroom_file_diff.task_settings import FileDiffTaskSettings, expected_files, expected_outputs, task_settings
from tackroom_file_diff.tolerance import ToleranceRules
from tackroom_file_diff.tracker import FileChangeTracker
from tackroom_file_diff.verifier import FileDiffOptions, FileDiffVerifier

__all__ = [
    "FORMATS",
    "BinaryDocument",
    "Cell",
    "CellChange",
    "ChangesReport",
    "FileChange",
    "FileChangeTracker",
    "FileDiffOptions",
    "FileDiffTaskSettings",
    "FileDiffVerifier",
    "FileFormat",
    "FileGrade",
    "Mismatch",
    "ParagraphChange",
    "ReaderOptions",
    "ReportLimits",
    "Snapshot",
    "SnapshotFile",
    "TableDocument",
    "TextDocument",
    "ToleranceRules",
    "changes_report",
    "describe_change",
    "detect_format",
    "expected_files",
    "expected_outputs",
    "grade_file",
    "read_document",
    "take_snapshot",
    "task_settings",
]
