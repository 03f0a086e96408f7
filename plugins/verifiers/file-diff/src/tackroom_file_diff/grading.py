"""Grading one output file against its expected file under tolerance rules."""

from __future__ import annotations

import difflib
import json
from typing import Any, Literal

from pydantic import BaseModel, Field

import tackroom
from tackroom_file_diff.documents import (
    BinaryDocument,
    Cell,
    ReaderOptions,
    TableDocument,
    TextDocument,
    cell_order,
    read_document,
)
from tackroom_file_diff.formats import FileFormat, decode_text, detect_format
from tackroom_file_diff.tolerance import (
    ToleranceRules,
    formula_key,
    line_skeleton,
    lines_match,
    normalize_text,
    values_match,
)

MAX_MISMATCHES_SHOWN = 20


class Mismatch(BaseModel):
    """Where the output differs from the expected file (``where`` is ``Sheet!B3``, ``line 4``, ``$.total`` …)."""

    where: str
    expected: Any = None
    actual: Any = None
    note: str | None = None


class FileGrade(BaseModel):
    """How well one output file matches its expected file."""

    path: str
    format: FileFormat
    status: Literal["match", "partial", "mismatch", "missing", "unreadable"]
    score: float
    matched: int = 0
    total: int = 0
    mismatches: list[Mismatch] = Field(default_factory=list)
    """The first few differences."""
    notes: list[str] = Field(default_factory=list)
    rules: ToleranceRules


def grade_file(path: str, actual: bytes | None, expected: bytes, rules: ToleranceRules,
               reader: ReaderOptions | None = None) -> FileGrade:
    """Grade the output at sandbox ``path`` (None when the agent did not produce it).

    Raises :class:`tackroom.TaskError` when the *expected* file cannot be read:
    a broken reference is the task's fault, never the agent's.
    """
    reader = reader or ReaderOptions()
    fmt = detect_format(path, expected)
    if actual is None:
        return FileGrade(path=path, format=fmt, status="missing", score=0.0, rules=rules,
                         notes=["the agent did not produce this file"])
    if fmt == "json":
        return _grade_json(path, actual, expected, rules)
    exp_doc = read_document(path, expected, reader, fmt)
    if exp_doc.error:
        raise tackroom.TaskError(f"expected file for {path} is unreadable ({exp_doc.error}); fix the task's expected/ copy")
    act_doc = read_document(path, actual, reader, fmt)
    if act_doc.error:
        return FileGrade(path=path, format=fmt, status="unreadable", score=0.0, rules=rules, notes=[act_doc.error])
    if isinstance(exp_doc, TableDocument) and isinstance(act_doc, TableDocument):
        matched, total, mismatches, notes = _compare_tables(exp_doc, act_doc, rules)
        notes = [*act_doc.notes, *notes]
    elif isinstance(exp_doc, TextDocument) and isinstance(act_doc, TextDocument):
        matched, total, mismatches = _compare_lines(exp_doc.lines, act_doc.lines, rules,
                                                    "paragraph" if fmt == "docx" else "line")
        notes = list(act_doc.notes)
    else:
        assert isinstance(exp_doc, BinaryDocument) and isinstance(act_doc, BinaryDocument)
        same = exp_doc.sha256 == act_doc.sha256
        matched, total, notes = int(same), 1, ["binary: compared byte for byte"]
        mismatches = [] if same else [Mismatch(where="content", expected=exp_doc.sha256[:16], actual=act_doc.sha256[:16])]
    return _finish(path, fmt, matched, total, mismatches, notes, rules)


def _finish(path: str, fmt: FileFormat, matched: int, total: int, mismatches: list[Mismatch], notes: list[str],
            rules: ToleranceRules) -> FileGrade:
    fraction = 1.0 if total == 0 else matched / total
    score = fraction if rules.partial_credit else float(fraction == 1.0)
    status = "match" if fraction == 1.0 else "partial" if matched else "mismatch"
    return FileGrade(path=path, format=fmt, status=status, score=score, matched=matched, total=total,
                     mismatches=mismatches[:MAX_MISMATCHES_SHOWN], notes=notes, rules=rules)


# -- tables ------------------------------------------------------------------------------
def _pair_sheets(expected: TableDocument, actual: TableDocument) -> tuple[list[tuple[str, str | None]], list[str]]:
    notes: list[str] = []
    exp_names, act_names = list(expected.sheets), list(actual.sheets)
    if expected.format == "csv" or (len(exp_names) == 1 and len(act_names) == 1 and exp_names != act_names):
        if expected.format != "csv":
            notes.append(f"sheet {act_names[0]!r} compared with expected sheet {exp_names[0]!r} (the only sheets)")
        return [(exp_names[0], act_names[0] if act_names else None)], notes
    return [(name, name if name in actual.sheets else None) for name in exp_names], notes


def _cell_matches(actual: Cell, expected: Cell, rules: ToleranceRules) -> bool:
    value_ok = values_match(actual.value, expected.value, rules)
    if rules.compare == "values" or expected.formula is None:
        return value_ok
    formula_ok = formula_key(actual.formula) == formula_key(expected.formula)
    return formula_ok if rules.compare == "formulas" else (formula_ok and value_ok)


def _compare_tables(expected: TableDocument, actual: TableDocument,
                    rules: ToleranceRules) -> tuple[int, int, list[Mismatch], list[str]]:
    pairs, notes = _pair_sheets(expected, actual)
    matched = total = 0
    mismatches: list[Mismatch] = []
    empty = Cell()
    unevaluated = 0
    for exp_name, act_name in pairs:
        exp_cells = expected.sheets[exp_name]
        act_cells = actual.sheets.get(act_name, {}) if act_name is not None else {}
        if act_name is None:
            notes.append(f"sheet {exp_name!r} is missing from the output")
        coordinates = set(exp_cells) if rules.ignore_extra_cells else set(exp_cells) | set(act_cells)
        for coordinate in sorted(coordinates, key=cell_order):
            exp, act = exp_cells.get(coordinate, empty), act_cells.get(coordinate, empty)
            total += 1
            if _cell_matches(act, exp, rules):
                matched += 1
                continue
            unevaluated += act.source == "unevaluated"
            mismatches.append(Mismatch(
                where=f"{exp_name}!{coordinate}" if expected.format == "xlsx" else coordinate,
                expected=exp.formula if rules.compare == "formulas" and exp.formula else exp.value,
                actual=act.formula if rules.compare == "formulas" and exp.formula else act.value,
                note="no cached value and pycel could not evaluate it" if act.source == "unevaluated" else None,
            ))
    if unevaluated:
        notes.append(f"{unevaluated} mismatching output cells hold formulas that could not be evaluated")
    return matched, total, mismatches, notes


# -- lines / paragraphs -----------------------------------------------------------------
def _compare_lines(expected: list[str], actual: list[str], rules: ToleranceRules,
                   unit: str) -> tuple[int, int, list[Mismatch]]:
    if rules.ignore_blank_lines:
        expected = [line for line in expected if line.strip()]
        actual = [line for line in actual if line.strip()]
    total = max(len(expected), len(actual))
    matcher = difflib.SequenceMatcher(None, [line_skeleton(x, rules) for x in expected],
                                      [line_skeleton(x, rules) for x in actual], autojunk=False)
    matched = 0
    mismatches: list[Mismatch] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for i, j in zip(range(i1, i2), range(j1, j2), strict=True):
                if lines_match(actual[j], expected[i], rules):
                    matched += 1
                else:
                    mismatches.append(Mismatch(where=f"{unit} {i + 1}", expected=expected[i], actual=actual[j],
                                               note="numbers differ beyond tolerance"))
            continue
        for k in range(max(i2 - i1, j2 - j1)):
            exp = expected[i1 + k] if i1 + k < i2 else None
            act = actual[j1 + k] if j1 + k < j2 else None
            where = f"{unit} {i1 + k + 1}" if exp is not None else f"extra {unit} {j1 + k + 1}"
            mismatches.append(Mismatch(where=where, expected=exp, actual=act))
    return matched, total, mismatches


# -- json --------------------------------------------------------------------------------
def _grade_json(path: str, actual: bytes, expected: bytes, rules: ToleranceRules) -> FileGrade:
    try:
        exp = json.loads(decode_text(expected))
    except json.JSONDecodeError as exc:
        raise tackroom.TaskError(f"expected file for {path} is not valid JSON ({exc}); fix the task's expected/ copy") from exc
    try:
        act = json.loads(decode_text(actual))
    except json.JSONDecodeError as exc:
        return FileGrade(path=path, format="json", status="unreadable", score=0.0, rules=rules,
                         notes=[f"not valid JSON: {exc}"])
    exp_leaves, act_leaves = dict(_leaves(exp, "$")), dict(_leaves(act, "$"))
    keys = set(exp_leaves) if rules.ignore_extra_cells else set(exp_leaves) | set(act_leaves)
    matched = 0
    mismatches: list[Mismatch] = []
    missing = object()
    for key in sorted(keys):
        e, a = exp_leaves.get(key, missing), act_leaves.get(key, missing)
        if e is not missing and a is not missing and _json_value_matches(a, e, rules):
            matched += 1
        else:
            mismatches.append(Mismatch(where=key, expected=None if e is missing else e,
                                       actual=None if a is missing else a,
                                       note="absent in output" if a is missing else "not expected" if e is missing else None))
    return _finish(path, "json", matched, len(keys), mismatches, ["compared as JSON values (key order ignored)"], rules)


def _json_value_matches(actual: Any, expected: Any, rules: ToleranceRules) -> bool:
    if isinstance(expected, str) and isinstance(actual, str):
        return normalize_text(actual, rules) == normalize_text(expected, rules)
    if isinstance(expected, bool) or isinstance(actual, bool) or expected is None or actual is None:
        return actual == expected and type(actual) is type(expected)
    return values_match(actual, expected, rules)


def _leaves(value: Any, where: str):
    if isinstance(value, dict):
        if not value:
            yield where, {}
        for k, v in value.items():
            yield from _leaves(v, f"{where}.{k}")
    elif isinstance(value, list):
        if not value:
            yield where, []
        for i, v in enumerate(value):
            yield from _leaves(v, f"{where}[{i}]")
    else:
        yield where, value
