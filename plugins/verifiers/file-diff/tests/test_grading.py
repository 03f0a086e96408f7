"""Grading an output against its expected file, per format, under tolerance rules."""

from __future__ import annotations

import pytest

import tackroom
from tackroom_file_diff import ToleranceRules, grade_file

STRICT = ToleranceRules()


def rules(**kw) -> ToleranceRules:
    return STRICT.merged(kw)


def test_csv_numbers_within_tolerance_match():
    expected = b"item,price\napple,3.33\npear,1200\n"
    actual = b"item,price\napple,3.3333\npear,\"1,200.00\"\n"
    strict = grade_file("/app/p.csv", actual, expected, STRICT)
    assert (strict.status, strict.matched, strict.total) == ("partial", 5, 6)
    assert strict.mismatches[0].where == "B2" and strict.mismatches[0].actual == "3.3333"
    loose = grade_file("/app/p.csv", actual, expected, rules(abs_tol=0.01))
    assert (loose.status, loose.score) == ("match", 1.0)
    no_strings = grade_file("/app/p.csv", actual, expected, rules(abs_tol=0.01, numeric_strings=False))
    assert no_strings.score < 1.0  # '1,200.00' is then just text


def test_percent_and_case_and_whitespace_rules():
    expected = b"name,share\nNorth  Region,25%\n"
    actual = b"name,share\n north region ,0.25\n"
    assert grade_file("/app/s.csv", actual, expected, STRICT).score == pytest.approx(3 / 4)
    assert grade_file("/app/s.csv", actual, expected, rules(ignore_case=True)).score == 1.0
    assert grade_file("/app/s.csv", actual, expected, rules(ignore_case=True, normalize_whitespace=False)).score < 1.0


def test_extra_cells_count_unless_ignored():
    expected = b"a,b\n1,2\n"
    actual = b"a,b,note\n1,2,checked\n"
    assert grade_file("/app/t.csv", actual, expected, STRICT).score == pytest.approx(4 / 6)
    assert grade_file("/app/t.csv", actual, expected, rules(ignore_extra_cells=True)).score == 1.0


def test_partial_credit_off_is_all_or_nothing():
    expected, actual = b"a,b\n1,2\n", b"a,b\n1,3\n"
    assert grade_file("/app/t.csv", actual, expected, STRICT).score == 0.75
    assert grade_file("/app/t.csv", actual, expected, rules(partial_credit=False)).score == 0.0


def test_xlsx_values_formulas_or_both(make_xlsx):
    expected = make_xlsx({"Totals": {"A1": 10, "A2": 20, "A3": "=SUM(A1:A2)"}})
    typed_in = make_xlsx({"Totals": {"A1": 10, "A2": 20, "A3": 30}})           # the right number, no formula
    other_formula = make_xlsx({"Totals": {"A1": 10, "A2": 20, "A3": "=A1+A2"}})  # same value, other formula
    wrong = make_xlsx({"Totals": {"A1": 10, "A2": 20, "A3": "=A1*A2"}})
    assert grade_file("/app/b.xlsx", typed_in, expected, STRICT).score == 1.0
    assert grade_file("/app/b.xlsx", other_formula, expected, STRICT).score == 1.0
    bad = grade_file("/app/b.xlsx", wrong, expected, STRICT)
    assert bad.score == pytest.approx(2 / 3) and bad.mismatches[0].where == "Totals!A3"
    assert (bad.mismatches[0].expected, bad.mismatches[0].actual) == (30, 200)
    assert grade_file("/app/b.xlsx", typed_in, expected, rules(compare="formulas")).score == pytest.approx(2 / 3)
    assert grade_file("/app/b.xlsx", other_formula, expected, rules(compare="formulas")).score == pytest.approx(2 / 3)
    assert grade_file("/app/b.xlsx", other_formula, expected, rules(compare="both")).score == pytest.approx(2 / 3)
    same = make_xlsx({"Totals": {"A1": 10, "A2": 20, "A3": "=sum($A$1:A2)"}})
    assert grade_file("/app/b.xlsx", same, expected, rules(compare="both")).score == 1.0


def test_xlsx_cached_values_are_graded_as_stored(make_xlsx):
    expected = make_xlsx({"S": {"A1": 2, "A2": "=A1*2"}})
    stale = make_xlsx({"S": {"A1": 2, "A2": "=A1*2"}}, cached={"S!A2": 5})  # saved by a program that cached 5
    grade = grade_file("/app/b.xlsx", stale, expected, STRICT)
    assert grade.score == 0.5 and (grade.mismatches[0].expected, grade.mismatches[0].actual) == (4, 5)


def test_xlsx_a_single_renamed_sheet_is_still_compared(make_xlsx):
    expected = make_xlsx({"Sheet1": {"A1": "x"}})
    actual = make_xlsx({"Results": {"A1": "x"}})
    grade = grade_file("/app/b.xlsx", actual, expected, STRICT)
    assert grade.score == 1.0 and "compared with expected sheet 'Sheet1'" in grade.notes[-1]


def test_docx_paragraphs(make_docx):
    expected = make_docx(["Total revenue was 1200 EUR.", "Margin: 12.5%"], heading="Summary")
    close = make_docx(["Total revenue was 1200.004 EUR.", "margin: 12.5%", ""], heading="Summary")
    assert grade_file("/app/r.docx", close, expected, STRICT).score == pytest.approx(1 / 3)
    assert grade_file("/app/r.docx", close, expected, rules(abs_tol=0.01, ignore_case=True)).score == 1.0
    missing = make_docx(["Total revenue was 1200 EUR."], heading="Summary")
    grade = grade_file("/app/r.docx", missing, expected, STRICT)
    assert grade.score == pytest.approx(2 / 3) and grade.mismatches[0].where == "paragraph 3"


def test_pdf_text(make_pdf):
    expected = make_pdf([["Invoice 1001", "Total: 120.00 EUR"]])
    assert grade_file("/app/i.pdf", make_pdf([["Invoice 1001", "Total: 120.001 EUR"]]), expected,
                      rules(abs_tol=0.01)).score == 1.0
    wrong = grade_file("/app/i.pdf", make_pdf([["Invoice 1001", "Total: 99.00 EUR"]]), expected, rules(abs_tol=0.01))
    assert wrong.status == "partial" and wrong.mismatches[0].note == "numbers differ beyond tolerance"


def test_json_structure_with_tolerance():
    expected = b'{"status": "done", "totals": {"q1": 10.0, "q2": 20.5}, "tags": ["a", "b"]}'
    actual = b'{"totals": {"q2": 20.5000001, "q1": 10}, "tags": ["a", "B"], "status": "done", "extra": 1}'
    grade = grade_file("/app/s.json", actual, expected, STRICT)
    assert (grade.matched, grade.total) == (4, 6)
    assert {m.where for m in grade.mismatches} == {"$.tags[1]", "$.extra"}
    assert grade_file("/app/s.json", actual, expected, rules(ignore_case=True, ignore_extra_cells=True)).score == 1.0
    assert grade_file("/app/s.json", b"{not json", expected, STRICT).status == "unreadable"


def test_text_lines_align_before_numbers_compare():
    expected = b"header\nvalue 1.00\nvalue 2.00\nfooter\n"
    actual = b"header\n\nvalue 1.001\nvalue 2.5\nfooter\nextra line\n"
    grade = grade_file("/app/o.txt", actual, expected, rules(abs_tol=0.01))
    assert (grade.matched, grade.total) == (3, 5)
    assert [m.where for m in grade.mismatches] == ["line 3", "extra line 5"]


def test_missing_and_unreadable_outputs_score_zero(make_xlsx):
    expected = make_xlsx({"S": {"A1": 1}})
    assert grade_file("/app/b.xlsx", None, expected, STRICT).status == "missing"
    unreadable = grade_file("/app/b.xlsx", b"PK but not really", expected, STRICT)
    assert (unreadable.status, unreadable.score) == ("unreadable", 0.0)


def test_a_broken_expected_file_is_a_task_error():
    with pytest.raises(tackroom.TaskError, match="expected file for /app/b.xlsx is unreadable"):
        grade_file("/app/b.xlsx", b"x", b"not an xlsx", STRICT)
    with pytest.raises(tackroom.TaskError, match="not valid JSON"):
        grade_file("/app/s.json", b"{}", b"{oops", STRICT)


def test_rule_layers_apply_only_what_they_set():
    base = ToleranceRules(abs_tol=0.5, ignore_case=True)
    merged = base.merged({"abs_tol": 0.01}, None, {"compare": "both"})
    assert (merged.abs_tol, merged.ignore_case, merged.compare) == (0.01, True, "both")
    with pytest.raises(ValueError, match="abs_tol"):
        base.merged({"abs_tol": -1})
