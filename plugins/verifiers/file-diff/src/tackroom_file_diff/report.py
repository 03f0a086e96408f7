"""The "what the agent changed" report: structured, size-capped, and printable into a judge prompt."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tackroom_file_diff.formats import FileFormat
from tackroom_file_diff.tolerance import CellValue


class ReportLimits(BaseModel):
    """Caps that keep a report bounded whatever the agent did.

    ``max_chars`` bounds :meth:`ChangesReport.to_text`; the item caps bound the
    structured report (and so its JSON) too.
    """

    model_config = ConfigDict(extra="forbid")

    max_chars: int = Field(default=12_000, ge=200, description="Budget of the rendered text report")
    max_files: int = Field(default=50, ge=1, description="Changed files described; the rest are only counted")
    max_items_per_file: int = Field(default=200, ge=1, description="Diff lines / cell / paragraph changes per file")
    max_value_chars: int = Field(default=300, ge=20, description="Longer cell values and lines are cut")
    context_lines: int = Field(default=2, ge=0, description="Unified-diff context lines")


class CellChange(BaseModel):
    """A cell whose value or formula differs. ``source`` says where the shown value came from
    (``literal`` / ``cached`` / ``evaluated`` / ``unevaluated``, see :mod:`tackroom_file_diff.documents`)."""

    sheet: str
    cell: str
    before: CellValue = None
    after: CellValue = None
    before_formula: str | None = None
    after_formula: str | None = None
    source: str = "literal"


class ParagraphChange(BaseModel):
    """A docx paragraph added, removed or rewritten (indices are 0-based positions before/after)."""

    op: Literal["added", "removed", "changed"]
    index_before: int | None = None
    index_after: int | None = None
    before: str | None = None
    after: str | None = None


class FileChange(BaseModel):
    """One added, removed or modified file, described the way its format reads best."""

    path: str
    status: Literal["added", "removed", "modified"]
    format: FileFormat
    size_before: int | None = None
    size_after: int | None = None
    summary: str = ""
    unified_diff: str | None = None
    """text, json and pdf (extracted text)."""
    cell_changes: list[CellChange] | None = None
    """csv and xlsx."""
    sheets_added: list[str] = Field(default_factory=list)
    sheets_removed: list[str] = Field(default_factory=list)
    paragraph_changes: list[ParagraphChange] | None = None
    """docx."""
    omitted_items: int = 0
    """Changes beyond ``max_items_per_file`` that are counted but not listed."""
    notes: list[str] = Field(default_factory=list)

    def to_text(self) -> str:
        head = f"## {self.status.upper()} {self.path} ({self.format}"
        if self.status == "modified":
            head += f", {self.size_before} -> {self.size_after} bytes"
        elif self.status == "added":
            head += f", {self.size_after} bytes"
        head += ")"
        out = [head]
        if self.summary:
            out.append(self.summary)
        for note in self.notes:
            out.append(f"note: {note}")
        if self.sheets_added:
            out.append("sheets added: " + ", ".join(self.sheets_added))
        if self.sheets_removed:
            out.append("sheets removed: " + ", ".join(self.sheets_removed))
        if self.unified_diff:
            out.append(self.unified_diff.rstrip("\n"))
        for c in self.cell_changes or []:
            out.append(f"{c.sheet}!{c.cell}: {_cell_text(c.before, c.before_formula)} -> "
                       f"{_cell_text(c.after, c.after_formula)}" + (f" [{c.source}]" if c.source != "literal" else ""))
        for p in self.paragraph_changes or []:
            if p.op == "added":
                out.append(f"+ [{p.index_after}] {p.after}")
            elif p.op == "removed":
                out.append(f"- [{p.index_before}] {p.before}")
            else:
                out.append(f"~ [{p.index_before}->{p.index_after}] {p.before!r} -> {p.after!r}")
        if self.omitted_items:
            out.append(f"… {self.omitted_items} more changes not shown")
        return "\n".join(out)


def _cell_text(value: CellValue, formula: str | None) -> str:
    if value is None and formula is None:
        return "(empty)"
    if formula is None:
        return repr(value)
    return f"{formula} = {value!r}"


class ChangesReport(BaseModel):
    """What changed under the snapshotted paths between two snapshots."""

    paths: list[str] = Field(default_factory=list)
    added: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    modified: list[str] = Field(default_factory=list)
    unchanged: int = 0
    files: list[FileChange] = Field(default_factory=list)
    """Described changes, at most ``limits.max_files``."""
    omitted_files: int = 0
    omitted_paths: list[str] = Field(default_factory=list)
    """The first 100 changed paths that are not described."""
    notes: list[str] = Field(default_factory=list)
    limits: ReportLimits = Field(default_factory=ReportLimits)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed or self.modified)

    def to_text(self, max_chars: int | None = None) -> str:
        """A plain-text rendering for prompts and logs, never longer than ``max_chars``.

        Each file gets an equal share of the budget (unused shares pass on to
        the next file), so one huge diff cannot hide the other changes.
        """
        budget = max_chars or self.limits.max_chars
        head = [f"Files under {', '.join(self.paths) or '(no paths)'}: "
                f"{len(self.added)} added, {len(self.removed)} removed, {len(self.modified)} modified, "
                f"{self.unchanged} unchanged."]
        head.extend(f"note: {n}" for n in self.notes)
        if self.omitted_files:
            head.append(f"({self.omitted_files} more changed files not described: "
                        + ", ".join(self.omitted_paths[:20]) + (" …" if self.omitted_files > 20 else "") + ")")
        text = "\n".join(head)
        if len(text) >= budget:
            return _cut(text, budget)
        left = budget - len(text)
        sections = [f.to_text() for f in self.files]
        parts = [text]
        for i, section in enumerate(sections):
            share = left // (len(sections) - i)
            piece = _cut(section, share - 2)
            parts.append(piece)
            left -= len(piece) + 2
        return _cut("\n\n".join(parts), budget)


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    longest = f"\n… [cut, {len(text)} more chars]"
    if limit <= len(longest):
        return text[: max(limit, 0)]
    keep = limit - len(longest)
    return text[:keep] + f"\n… [cut, {len(text) - keep} more chars]"
