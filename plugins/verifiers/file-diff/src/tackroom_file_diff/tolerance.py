"""Tolerance rules: when an agent's value counts as the expected one.

Rules are layered (plugin options → per-format options → the task's
``[file_diff]`` table → its per-file overrides); each layer sets only the
fields it names, so ``{abs_tol = 0.01}`` on one file keeps every other rule.
"""

from __future__ import annotations

import math
import re
from datetime import date, datetime, time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

CellValue = str | int | float | bool | None

_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?%?")
_SPACES = re.compile(r"\s+")


class ToleranceRules(BaseModel):
    """How strictly an output file must match its expected file.

    Numbers compare with ``math.isclose(actual, expected, rel_tol, abs_tol)``;
    text is normalised before it compares. ``partial_credit`` gives a file the
    fraction of cells/lines/paragraphs that match; without it a file scores 1
    only when everything matches.
    """

    model_config = ConfigDict(extra="forbid")

    abs_tol: float = Field(default=1e-6, ge=0, description="Absolute tolerance for numbers")
    rel_tol: float = Field(default=1e-6, ge=0, description="Relative tolerance for numbers")
    numeric_strings: bool = Field(
        default=True, description="Text that reads as a number ('1,234.50', '12%') compares as that number"
    )
    normalize_whitespace: bool = Field(
        default=True, description="Strip ends and collapse runs of whitespace inside text before comparing"
    )
    ignore_case: bool = Field(default=False, description="Compare text case-insensitively")
    ignore_blank_lines: bool = Field(default=True, description="Drop empty lines / paragraphs before comparing")
    ignore_extra_cells: bool = Field(
        default=False, description="Tables: non-empty cells the expected file lacks are not counted against the output"
    )
    compare: Literal["values", "formulas", "both"] = Field(
        default="values",
        description="xlsx: compare cell values (cached, or evaluated when the file has none), formulas, or both",
    )
    partial_credit: bool = Field(default=True, description="Score a file by the fraction that matches")

    def merged(self, *layers: dict[str, Any] | BaseModel | None) -> ToleranceRules:
        """These rules with each layer's explicitly set (non-None) fields applied in order; validated."""
        update: dict[str, Any] = {}
        for layer in layers:
            if isinstance(layer, BaseModel):
                update.update(layer.model_dump(include=layer.model_fields_set, exclude_none=True))
            elif layer:
                update.update({k: v for k, v in layer.items() if v is not None})
        return ToleranceRules.model_validate({**self.model_dump(), **update})


def as_number(value: CellValue, rules: ToleranceRules) -> float | None:
    """The number ``value`` stands for, or None. Booleans are not numbers."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if not rules.numeric_strings:
        return None
    text = value.strip()
    if not text or not _NUMBER.fullmatch(text):
        return None
    scale = 1.0
    if text.endswith("%"):
        text, scale = text[:-1], 0.01
    try:
        return float(text.replace(",", "")) * scale
    except ValueError:
        return None


def normalize_text(text: str, rules: ToleranceRules) -> str:
    if rules.normalize_whitespace:
        text = _SPACES.sub(" ", text).strip()
    if rules.ignore_case:
        text = text.casefold()
    return text


def plain_value(value: Any) -> CellValue:
    """A JSON-friendly cell value: dates become ISO strings, other objects their text."""
    if value is None or isinstance(value, (str, bool, int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        return value
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    return str(value)


def values_match(actual: CellValue, expected: CellValue, rules: ToleranceRules) -> bool:
    """One value against another under the rules (empty string and None are the same)."""
    if actual == "":
        actual = None
    if expected == "":
        expected = None
    if actual is None or expected is None:
        return actual is None and expected is None
    a, e = as_number(actual, rules), as_number(expected, rules)
    if a is not None and e is not None:
        return math.isclose(a, e, rel_tol=rules.rel_tol, abs_tol=rules.abs_tol)
    if isinstance(actual, bool) or isinstance(expected, bool):
        return str(actual).casefold() == str(expected).casefold()
    return normalize_text(str(actual), rules) == normalize_text(str(expected), rules)


def formula_key(formula: str | None) -> str | None:
    """A formula without case, spaces or ``$`` anchors, so ``=sum($A$1:A2)`` equals ``=SUM(A1:A2)``."""
    if formula is None:
        return None
    return re.sub(r"\s+|\$", "", formula).upper()


def line_skeleton(line: str, rules: ToleranceRules) -> str:
    """A line with its numbers masked, for aligning lines before numbers are compared with tolerance."""
    return _NUMBER.sub("#", normalize_text(line, rules))


def lines_match(actual: str, expected: str, rules: ToleranceRules) -> bool:
    """Two lines match when their text matches and every number matches within tolerance."""
    a, e = normalize_text(actual, rules), normalize_text(expected, rules)
    if a == e:
        return True
    if _NUMBER.sub("#", a) != _NUMBER.sub("#", e):
        return False
    a_nums, e_nums = _NUMBER.findall(a), _NUMBER.findall(e)
    return all(values_match(x, y, rules) for x, y in zip(a_nums, e_nums, strict=True))
