"""The "what the agent changed" report, on real files of every format."""

from __future__ import annotations

import json

import pytest

import tackroom
from tackroom_file_diff import ReportLimits, Snapshot, changes_report


def snap(make_tar, files, paths=("/app",)) -> Snapshot:
    return Snapshot.from_tar(make_tar(files), list(paths))


def one(report, path):
    return next(f for f in report.files if f.path == path)


def test_added_removed_modified_and_unchanged_files(make_tar):
    before = snap(make_tar, {"/app/keep.txt": "same\n", "/app/old.txt": "bye\n", "/app/notes.txt": "a\nb\nc\n"})
    after = snap(make_tar, {"/app/keep.txt": "same\n", "/app/new.txt": "hello\n", "/app/notes.txt": "a\nB\nc\nd\n"})
    report = changes_report(before, after)
    assert (report.added, report.removed, report.modified, report.unchanged) == (
        ["/app/new.txt"], ["/app/old.txt"], ["/app/notes.txt"], 1)
    notes = one(report, "/app/notes.txt")
    assert notes.format == "text" and notes.summary == "+2 -1 lines"
    assert notes.unified_diff.splitlines()[:2] == ["--- a/app/notes.txt", "+++ b/app/notes.txt"]
    assert {"-b", "+B", "+d"} <= set(notes.unified_diff.splitlines())
    assert one(report, "/app/new.txt").unified_diff.endswith("+hello")
    assert one(report, "/app/old.txt").status == "removed"
    text = report.to_text()
    assert "1 added, 1 removed, 1 modified, 1 unchanged" in text and "## MODIFIED /app/notes.txt" in text


def test_csv_changes_are_cells(make_tar):
    before = snap(make_tar, {"/app/sales.csv": "region,q1,q2\nnorth,10,20\nsouth,5,7\n"})
    after = snap(make_tar, {"/app/sales.csv": "region,q1,q2,total\nnorth,10,21,31\nsouth,5,7,12\n"})
    change = one(changes_report(before, after), "/app/sales.csv")
    cells = {c.cell: (c.before, c.after) for c in change.cell_changes}
    assert cells == {"D1": (None, "total"), "C2": ("20", "21"), "D2": (None, "31"), "D3": (None, "12")}
    assert change.summary == "4 cells changed (3 filled, 0 emptied, 1 rewritten) in 1 sheet(s)"
    assert "sales.csv!C2: '20' -> '21'" in change.to_text()


def test_xlsx_formulas_without_cached_values_are_evaluated(make_tar, make_xlsx):
    book = {"Data": {"A1": 2, "A2": 3, "A3": "=SUM(A1:A2)*2"}, "Summary": {"B1": "=Data!A3/4"}}
    before = snap(make_tar, {"/app/book.xlsx": make_xlsx(book)})
    after = snap(make_tar, {"/app/book.xlsx": make_xlsx({**book, "Data": {**book["Data"], "A2": 8}})})
    change = one(changes_report(before, after), "/app/book.xlsx")
    cells = {f"{c.sheet}!{c.cell}": c for c in change.cell_changes}
    assert set(cells) == {"Data!A2", "Data!A3", "Summary!B1"}
    assert (cells["Data!A2"].before, cells["Data!A2"].after, cells["Data!A2"].source) == (3, 8, "literal")
    a3 = cells["Data!A3"]
    assert (a3.before, a3.after, a3.after_formula, a3.source) == (10, 20, "=SUM(A1:A2)*2", "evaluated")
    assert (cells["Summary!B1"].before, cells["Summary!B1"].after) == (2.5, 5.0)
    assert any("evaluated with pycel" in n for n in change.notes)
    assert "Data!A3: =SUM(A1:A2)*2 = 10 -> =SUM(A1:A2)*2 = 20 [evaluated]" in change.to_text()


def test_xlsx_cached_values_are_used_as_stored_and_labelled(make_tar, make_xlsx):
    # A stale cached value (Excel saved 99) wins over evaluation, and the report says "cached".
    sheets = {"S": {"A1": 1, "A2": "=A1+1"}}
    before = snap(make_tar, {"/app/b.xlsx": make_xlsx(sheets, cached={"S!A2": 99})})
    after = snap(make_tar, {"/app/b.xlsx": make_xlsx({"S": {"A1": 1, "A2": "=A1+2"}})})
    change = one(changes_report(before, after), "/app/b.xlsx")
    (cell,) = change.cell_changes
    assert (cell.before, cell.before_formula, cell.after, cell.after_formula) == (99, "=A1+1", 3, "=A1+2")
    assert cell.source == "evaluated"  # the after side had no cached value
    reverse = one(changes_report(after, before), "/app/b.xlsx").cell_changes[0]
    assert reverse.source == "cached" and reverse.after == 99


def test_xlsx_sheets_added_and_removed(make_tar, make_xlsx):
    before = snap(make_tar, {"/app/b.xlsx": make_xlsx({"Old": {"A1": "x"}, "Keep": {"A1": 1}})})
    after = snap(make_tar, {"/app/b.xlsx": make_xlsx({"Keep": {"A1": 1}, "New": {"B2": "y"}})})
    change = one(changes_report(before, after), "/app/b.xlsx")
    assert change.sheets_added == ["New"] and change.sheets_removed == ["Old"]
    assert {(c.sheet, c.cell, c.before, c.after) for c in change.cell_changes} == {
        ("Old", "A1", "x", None), ("New", "B2", None, "y")}


def test_docx_changes_are_paragraphs(make_tar, make_docx):
    before = make_docx(["Revenue grew.", "Costs were flat.", "Outlook: stable."], table=[["k", "v"], ["q1", "10"]],
                       heading="Quarterly report")
    after = make_docx(["Revenue grew 12%.", "Outlook: stable.", "Hiring resumed."], table=[["k", "v"], ["q1", "12"]],
                      heading="Quarterly report")
    change = one(changes_report(snap(make_tar, {"/app/r.docx": before}), snap(make_tar, {"/app/r.docx": after})),
                 "/app/r.docx")
    ops = [(p.op, p.before, p.after) for p in change.paragraph_changes]
    assert ("changed", "Revenue grew.", "Revenue grew 12%.") in ops
    assert ("removed", "Costs were flat.", None) in ops
    assert ("added", None, "Hiring resumed.") in ops
    assert ("changed", "| q1 | 10 |", "| q1 | 12 |") in ops
    assert change.summary.startswith("paragraphs:")


def test_pdf_changes_are_extracted_text_with_layout(make_tar, make_pdf):
    before = make_pdf([["Invoice 1001", "Total: 120.00 EUR"], ["Page two text"]], columns=[("Left col", "Right col")])
    after = make_pdf([["Invoice 1001", "Total: 135.50 EUR"], ["Page two text"]], columns=[("Left col", "Right col")])
    change = one(changes_report(snap(make_tar, {"/app/i.pdf": before}), snap(make_tar, {"/app/i.pdf": after})),
                 "/app/i.pdf")
    assert change.format == "pdf" and change.summary == "+1 -1 lines of extracted text"
    lines = change.unified_diff.splitlines()
    assert any(line.startswith("-") and "Total: 120.00 EUR" in line for line in lines)
    assert any(line.startswith("+") and "Total: 135.50 EUR" in line for line in lines)
    # Layout mode keeps the two columns on one line, apart.
    from tackroom_file_diff import read_document

    doc = read_document("/app/i.pdf", after)
    assert doc.lines[0] == "--- page 1 ---" and "--- page 2 ---" in doc.lines
    row = next(line for line in doc.lines if "Left col" in line)
    assert "Right col" in row and row.index("Right col") - row.index("Left col") > 20


def test_a_malformed_office_file_is_reported_not_raised(make_tar, make_xlsx):
    before = snap(make_tar, {"/app/out.xlsx": make_xlsx({"S": {"A1": 1}})})
    after = snap(make_tar, {"/app/out.xlsx": b"this is not a zip file"})
    change = one(changes_report(before, after), "/app/out.xlsx")
    assert change.format == "xlsx" and change.summary.startswith("content sha256")
    assert any(n.startswith("after: could not read as xlsx") for n in change.notes)


def test_binary_files_compare_by_hash(make_tar):
    change = one(changes_report(snap(make_tar, {"/app/x.bin": b"\x00\x01"}), snap(make_tar, {"/app/x.bin": b"\x00\x02"})),
                 "/app/x.bin")
    assert change.format == "binary" and change.summary.startswith("content sha256 ")


def test_files_over_the_snapshot_limit_are_compared_by_hash(make_tar):
    before = Snapshot.from_tar(make_tar({"/app/big.txt": "a" * 5000}), ["/app"], max_file_bytes=1000)
    after = Snapshot.from_tar(make_tar({"/app/big.txt": "b" * 5000}), ["/app"], max_file_bytes=1000)
    assert before.files["/app/big.txt"].data is None and any("over the 1000-byte limit" in n for n in before.notes)
    report = changes_report(before, after)
    assert report.modified == ["/app/big.txt"]
    assert report.files[0].notes == ["over the snapshot size limit: compared by hash only"]


def test_the_report_stays_within_its_caps(make_tar):
    many = {f"/app/f{i:04d}.txt": f"line {i}\n" for i in range(300)}
    huge_before = "\n".join(f"row {i}" for i in range(5000))
    huge_after = "\n".join(f"ROW {i}" for i in range(5000))
    before = snap(make_tar, {"/app/huge.txt": huge_before})
    after = snap(make_tar, {**many, "/app/huge.txt": huge_after, "/app/long.txt": "x" * 10_000})
    limits = ReportLimits(max_chars=3000, max_files=20, max_items_per_file=50, max_value_chars=80)
    report = changes_report(before, after, limits=limits, priority=["/app/long.txt"])
    # described first: the priority path, then the modified file, then added files by path
    assert [f.path for f in report.files][:3] == ["/app/f0000.txt", "/app/f0001.txt", "/app/f0002.txt"]
    assert {"/app/long.txt", "/app/huge.txt"} <= {f.path for f in report.files}
    assert "/app/f0018.txt" in report.omitted_paths and "/app/f0017.txt" not in report.omitted_paths
    assert len(report.added) == 301 and report.omitted_files == 302 - 20 and len(report.files) == 20
    huge = one(report, "/app/huge.txt")
    assert len(huge.unified_diff.splitlines()) == 50 and huge.omitted_items > 9000
    long = one(report, "/app/long.txt")
    assert max(len(line) for line in long.unified_diff.splitlines()) <= 80
    for budget in (300, 1000, 3000, 50_000):
        assert len(report.to_text(max_chars=budget)) <= budget
    assert len(report.to_text()) <= 3000
    text = report.to_text(max_chars=3000)
    assert "282 more changed files not described" in text
    # every described file still gets some of the budget
    assert sum(1 for f in report.files if f"/{f.path.rsplit('/', 1)[-1]}" in text) == 20
    assert len(json.dumps(report.model_dump(mode="json"))) < 200_000


def test_a_snapshot_that_is_not_a_tar_is_a_sandbox_error():
    with pytest.raises(tackroom.SandboxError, match="not a tar archive"):
        Snapshot.from_tar(b"garbage" * 100, ["/app"])
