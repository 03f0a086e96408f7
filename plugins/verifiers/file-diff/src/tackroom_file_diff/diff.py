"""Computing a :class:`ChangesReport` from two snapshots."""

from __future__ import annotations

import difflib

from tackroom_file_diff.documents import (
    Cell,
    ReaderOptions,
    TableDocument,
    TextDocument,
    cell_order,
    read_document,
)
from tackroom_file_diff.formats import detect_format
from tackroom_file_diff.report import CellChange, ChangesReport, FileChange, ParagraphChange, ReportLimits
from tackroom_file_diff.snapshot import Snapshot, SnapshotFile

MAX_DIFF_LINES = 20_000
"""Lines per side a text diff looks at; difflib is quadratic in the worst case."""


def changes_report(before: Snapshot, after: Snapshot, *, limits: ReportLimits | None = None,
                   reader: ReaderOptions | None = None, priority: list[str] | None = None) -> ChangesReport:
    """What changed from ``before`` to ``after``: added/removed/modified files, each described per format.

    This is the helper other verifiers use::

        from tackroom_file_diff import changes_report, take_snapshot

        before = await take_snapshot(sandbox, ["/app/output"])   # in Verifier.prepare
        after = await take_snapshot(sandbox, ["/app/output"])    # in Verifier.verify
        report = changes_report(before, after)
        prompt_part = report.to_text(max_chars=6000)

    The report is bounded by ``limits`` (files described, items per file,
    characters per value) whatever the agent wrote. When more files changed
    than ``limits.max_files``, the ones described first are those under
    ``priority`` paths (e.g. the task's expected outputs), then modified, then
    removed, then added files.
    """
    limits = limits or ReportLimits()
    reader = reader or ReaderOptions()
    b, a = before.files, after.files
    added = sorted(set(a) - set(b))
    removed = sorted(set(b) - set(a))
    modified = sorted(p for p in set(a) & set(b) if a[p].sha256 != b[p].sha256)
    unchanged = len(set(a) & set(b)) - len(modified)
    prefixes = [p.rstrip("/") for p in priority or []]

    def rank(path: str) -> tuple[int, int, str]:
        wanted = any(path == p or path.startswith(p + "/") for p in prefixes)
        status = 0 if path in modified_set else 1 if path in removed_set else 2
        return (0 if wanted else 1, status, path)

    modified_set, removed_set = set(modified), set(removed)
    changed = sorted(added + removed + modified, key=rank)
    report = ChangesReport(
        paths=sorted(set(before.paths) | set(after.paths)),
        added=added, removed=removed, modified=modified, unchanged=unchanged, limits=limits,
        notes=[*before.notes, *after.notes],
    )
    described = sorted(changed[: limits.max_files])
    for path in described:
        report.files.append(describe_change(path, b.get(path), a.get(path), limits, reader))
    rest = sorted(changed[limits.max_files:])
    report.omitted_files = len(rest)
    report.omitted_paths = rest[:100]
    return report


def describe_change(path: str, before: SnapshotFile | None, after: SnapshotFile | None,
                    limits: ReportLimits | None = None, reader: ReaderOptions | None = None) -> FileChange:
    """One file's change; ``before``/``after`` is None when the file did not exist then."""
    limits = limits or ReportLimits()
    reader = reader or ReaderOptions()
    status = "added" if before is None else "removed" if after is None else "modified"
    sample = (after or before).data or b""  # type: ignore[union-attr]
    fmt = detect_format(path, sample)
    change = FileChange(path=path, status=status, format=fmt,
                        size_before=before.size if before else None, size_after=after.size if after else None)
    if (before is not None and before.data is None) or (after is not None and after.data is None):
        change.notes.append("over the snapshot size limit: compared by hash only")
        change.summary = _hash_summary(before, after)
        return change
    doc_before = read_document(path, before.data, reader, fmt) if before else None  # type: ignore[arg-type]
    doc_after = read_document(path, after.data, reader, fmt) if after else None  # type: ignore[arg-type]
    for label, doc in (("before", doc_before), ("after", doc_after)):
        if doc is not None:
            if doc.error:
                change.notes.append(f"{label}: {doc.error}")
            change.notes.extend(f"{label}: {n}" for n in doc.notes)
    kinds = {type(d) for d in (doc_before, doc_after) if d is not None}
    if kinds == {TableDocument}:
        _diff_tables(change, doc_before, doc_after, limits)  # type: ignore[arg-type]
    elif kinds == {TextDocument} and fmt == "docx":
        _diff_paragraphs(change, doc_before, doc_after, limits)  # type: ignore[arg-type]
    elif kinds == {TextDocument}:
        _diff_lines(change, doc_before, doc_after, limits)  # type: ignore[arg-type]
    else:
        change.summary = _hash_summary(before, after)
    return change


def _hash_summary(before: SnapshotFile | None, after: SnapshotFile | None) -> str:
    b = f"sha256 {before.sha256[:12]}" if before else "(absent)"
    a = f"sha256 {after.sha256[:12]}" if after else "(absent)"
    return f"content {b} -> {a}"


def _clip(text: str, limits: ReportLimits) -> str:
    if len(text) <= limits.max_value_chars:
        return text
    return text[: limits.max_value_chars - 1] + "…"


def _clip_value(value, limits: ReportLimits):
    return _clip(value, limits) if isinstance(value, str) else value


# -- tables ------------------------------------------------------------------------------
def _diff_tables(change: FileChange, before: TableDocument | None, after: TableDocument | None,
                 limits: ReportLimits) -> None:
    sheets_b = before.sheets if before else {}
    sheets_a = after.sheets if after else {}
    if before is not None and after is not None:
        change.sheets_added = [s for s in sheets_a if s not in sheets_b]
        change.sheets_removed = [s for s in sheets_b if s not in sheets_a]
    changes: list[CellChange] = []
    counts = {"added": 0, "removed": 0, "modified": 0}
    touched: set[str] = set()
    empty = Cell()
    for sheet in [*sheets_b, *(s for s in sheets_a if s not in sheets_b)]:
        cells_b, cells_a = sheets_b.get(sheet, {}), sheets_a.get(sheet, {})
        for coordinate in sorted(set(cells_b) | set(cells_a), key=cell_order):
            cb, ca = cells_b.get(coordinate, empty), cells_a.get(coordinate, empty)
            if cb.value == ca.value and cb.formula == ca.formula and type(cb.value) is type(ca.value):
                continue
            kind = "added" if coordinate not in cells_b else "removed" if coordinate not in cells_a else "modified"
            counts[kind] += 1
            touched.add(sheet)
            if len(changes) < limits.max_items_per_file:
                changes.append(CellChange(
                    sheet=sheet, cell=coordinate,
                    before=_clip_value(cb.value, limits), after=_clip_value(ca.value, limits),
                    before_formula=cb.formula, after_formula=ca.formula,
                    source=(ca if coordinate in cells_a else cb).source,
                ))
    total = sum(counts.values())
    change.cell_changes = changes
    change.omitted_items = total - len(changes)
    change.summary = (f"{total} cells changed ({counts['added']} filled, {counts['removed']} emptied, "
                      f"{counts['modified']} rewritten) in {len(touched)} sheet(s)")


# -- docx paragraphs -------------------------------------------------------------------
def _diff_paragraphs(change: FileChange, before: TextDocument | None, after: TextDocument | None,
                     limits: ReportLimits) -> None:
    lines_b = before.lines[:MAX_DIFF_LINES] if before else []
    lines_a = after.lines[:MAX_DIFF_LINES] if after else []
    ops: list[ParagraphChange] = []
    matcher = difflib.SequenceMatcher(None, lines_b, lines_a, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        paired = min(i2 - i1, j2 - j1) if tag == "replace" else 0
        for k in range(paired):
            ops.append(ParagraphChange(op="changed", index_before=i1 + k, index_after=j1 + k,
                                       before=_clip(lines_b[i1 + k], limits), after=_clip(lines_a[j1 + k], limits)))
        for i in range(i1 + paired, i2):
            ops.append(ParagraphChange(op="removed", index_before=i, before=_clip(lines_b[i], limits)))
        for j in range(j1 + paired, j2):
            ops.append(ParagraphChange(op="added", index_after=j, after=_clip(lines_a[j], limits)))
    counts = {op: sum(1 for p in ops if p.op == op) for op in ("added", "removed", "changed")}
    change.paragraph_changes = ops[: limits.max_items_per_file]
    change.omitted_items = len(ops) - len(change.paragraph_changes)
    change.summary = f"paragraphs: {counts['added']} added, {counts['removed']} removed, {counts['changed']} changed"


# -- text, json, pdf ------------------------------------------------------------------
def _diff_lines(change: FileChange, before: TextDocument | None, after: TextDocument | None,
                limits: ReportLimits) -> None:
    lines_b = before.lines if before else []
    lines_a = after.lines if after else []
    if len(lines_b) > MAX_DIFF_LINES or len(lines_a) > MAX_DIFF_LINES:
        change.notes.append(f"diffed the first {MAX_DIFF_LINES} lines only")
        lines_b, lines_a = lines_b[:MAX_DIFF_LINES], lines_a[:MAX_DIFF_LINES]
    diff = list(difflib.unified_diff(lines_b, lines_a, fromfile=f"a{change.path}", tofile=f"b{change.path}",
                                     n=limits.context_lines, lineterm=""))
    plus = sum(1 for line in diff[2:] if line.startswith("+"))
    minus = sum(1 for line in diff[2:] if line.startswith("-"))
    shown = diff[: limits.max_items_per_file]
    change.unified_diff = "\n".join(_clip(line, limits) for line in shown)
    change.omitted_items = sum(1 for line in diff[len(shown):] if line[:1] in "+-")
    unit = "lines of extracted text" if change.format == "pdf" else "lines"
    change.summary = f"+{plus} -{minus} {unit}"


__all__ = ["MAX_DIFF_LINES", "changes_report", "describe_change"]
