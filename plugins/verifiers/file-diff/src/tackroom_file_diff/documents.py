"""Readers that turn a file's bytes into something comparable.

- csv/tsv and xlsx → :class:`TableDocument`: sheets of non-empty cells by A1
  address. xlsx cells keep their formula and say where their value came from:
  ``cached`` (the value Excel/LibreOffice stored when it saved the file),
  ``evaluated`` (no cached value, so pycel computed it), ``unevaluated``
  (neither worked) or ``literal`` (no formula).
- docx → :class:`TextDocument` of paragraphs (python-docx), tables as
  ``| a | b |`` rows in document order.
- pdf → :class:`TextDocument` of lines, pdfplumber's layout-preserving text per
  page (columns stay apart), with a ``--- page N ---`` line before each page.
- text/json → :class:`TextDocument` of lines; anything else →
  :class:`BinaryDocument` (size and hash).

Readers never raise on a malformed file: an agent may write garbage into
``out.xlsx``. They return a :class:`BinaryDocument` whose ``error`` says why.
"""

from __future__ import annotations

import csv
import hashlib
import io
import logging
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tackroom_file_diff.formats import FileFormat, decode_text, detect_format
from tackroom_file_diff.tolerance import CellValue, plain_value

ValueSource = Literal["literal", "cached", "evaluated", "unevaluated"]


class ReaderOptions(BaseModel):
    """Limits and switches for the readers."""

    model_config = ConfigDict(extra="forbid")

    evaluate_formulas: bool = Field(
        default=True, description="xlsx: compute formulas that have no cached value with pycel"
    )
    max_cells: int = Field(default=200_000, ge=1, description="Cells read per table file before it is cut")
    max_pdf_pages: int = Field(default=100, ge=1, description="PDF pages read")
    pdf_layout: bool = Field(default=True, description="pdfplumber layout mode (keeps columns and indentation)")


class Cell(BaseModel):
    """One non-empty cell."""

    value: CellValue = None
    formula: str | None = None
    source: ValueSource = "literal"


class TableDocument(BaseModel):
    """A csv or xlsx file: ``sheets[name][A1] = Cell``. A csv file has one sheet named after the file."""

    kind: Literal["table"] = "table"
    format: FileFormat
    sheets: dict[str, dict[str, Cell]]
    notes: list[str] = Field(default_factory=list)
    error: str | None = None


class TextDocument(BaseModel):
    """Text, json, docx paragraphs or pdf text, as lines."""

    kind: Literal["text"] = "text"
    format: FileFormat
    lines: list[str]
    notes: list[str] = Field(default_factory=list)
    error: str | None = None


class BinaryDocument(BaseModel):
    """A file read only as bytes (unknown format, or one its reader could not parse: see ``error``)."""

    kind: Literal["binary"] = "binary"
    format: FileFormat
    size: int
    sha256: str
    notes: list[str] = Field(default_factory=list)
    error: str | None = None


Document = TableDocument | TextDocument | BinaryDocument


def read_document(path: str, data: bytes, options: ReaderOptions | None = None,
                  fmt: FileFormat | None = None) -> Document:
    """Read ``data`` (the content of sandbox file ``path``) with the reader its format calls for."""
    options = options or ReaderOptions()
    fmt = fmt or detect_format(path, data)
    try:
        if fmt == "csv":
            return _read_csv(path, data, options)
        if fmt == "xlsx":
            return _read_xlsx(data, options)
        if fmt == "docx":
            return _read_docx(data)
        if fmt == "pdf":
            return _read_pdf(data, options)
        if fmt in ("text", "json"):
            return TextDocument(format=fmt, lines=decode_text(data).splitlines())
    except Exception as exc:
        return _binary(fmt, data, error=f"could not read as {fmt}: {type(exc).__name__}: {exc}")
    return _binary(fmt, data)


def _binary(fmt: FileFormat, data: bytes, error: str | None = None) -> BinaryDocument:
    return BinaryDocument(format=fmt, size=len(data), sha256=hashlib.sha256(data).hexdigest(), error=error)


_A1 = re.compile(r"([A-Z]+)(\d+)")


def address(row: int, column: int) -> str:
    """1-based (row, column) → ``A1`` (column 27 is ``AA``)."""
    letters = ""
    while column:
        column, rest = divmod(column - 1, 26)
        letters = chr(65 + rest) + letters
    return f"{letters}{row}"


def cell_order(coordinate: str) -> tuple[int, int]:
    """Sort key putting ``A2`` before ``A10`` and ``B1`` after ``A1``: row first, then column."""
    match = _A1.fullmatch(coordinate)
    if match is None:
        return (0, 0)
    column = 0
    for letter in match.group(1):
        column = column * 26 + ord(letter) - 64
    return int(match.group(2)), column


# -- csv -------------------------------------------------------------------------------
def _read_csv(path: str, data: bytes, options: ReaderOptions) -> TableDocument:
    text = decode_text(data)
    delimiter = "\t" if path.lower().endswith(".tsv") else None
    if delimiter is None:
        try:
            delimiter = csv.Sniffer().sniff(text[:8192], delimiters=",;\t|").delimiter
        except csv.Error:
            delimiter = ","
    cells: dict[str, Cell] = {}
    notes: list[str] = []
    for r, row in enumerate(csv.reader(io.StringIO(text), delimiter=delimiter), start=1):
        for c, value in enumerate(row, start=1):
            if value != "":
                cells[address(r, c)] = Cell(value=value)
        if len(cells) >= options.max_cells:
            notes.append(f"cut after {options.max_cells} cells (row {r})")
            break
    name = path.rsplit("/", 1)[-1]
    return TableDocument(format="csv", sheets={name: cells}, notes=notes)


# -- xlsx ------------------------------------------------------------------------------
def _read_xlsx(data: bytes, options: ReaderOptions) -> TableDocument:
    from openpyxl import load_workbook

    formulas_wb = load_workbook(io.BytesIO(data), data_only=False)
    cached_wb = load_workbook(io.BytesIO(data), data_only=True)
    sheets: dict[str, dict[str, Cell]] = {}
    notes: list[str] = []
    pending: list[tuple[str, str]] = []  # (sheet, A1) formulas with no cached value
    count = 0
    for ws in formulas_wb.worksheets:
        cached_ws = cached_wb[ws.title]
        cells: dict[str, Cell] = {}
        for row in ws.iter_rows():
            for cell in row:
                raw = cell.value
                if raw is None or raw == "":
                    continue
                formula = _formula_text(raw)
                if formula is None:
                    cells[cell.coordinate] = Cell(value=plain_value(raw))
                else:
                    cached = cached_ws[cell.coordinate].value
                    if cached is not None:
                        cells[cell.coordinate] = Cell(value=plain_value(cached), formula=formula, source="cached")
                    else:
                        cells[cell.coordinate] = Cell(formula=formula, source="unevaluated")
                        pending.append((ws.title, cell.coordinate))
                count += 1
            if count >= options.max_cells:
                break
        sheets[ws.title] = cells
        if count >= options.max_cells:
            notes.append(f"cut after {options.max_cells} cells (sheet {ws.title!r})")
            break
    if pending and options.evaluate_formulas:
        notes.extend(_evaluate(data, pending, sheets))
    elif pending:
        notes.append(f"{len(pending)} formula cells have no cached value and evaluation is off")
    return TableDocument(format="xlsx", sheets=sheets, notes=notes)


def _formula_text(raw: Any) -> str | None:
    if isinstance(raw, str):
        return raw if raw.startswith("=") and len(raw) > 1 else None
    text = getattr(raw, "text", None)  # ArrayFormula / DataTableFormula
    if isinstance(text, str):
        return text if text.startswith("=") else f"={text}"
    return None


def _evaluate(data: bytes, pending: list[tuple[str, str]], sheets: dict[str, dict[str, Cell]]) -> list[str]:
    """Fill in formula cells that have no cached value with pycel; say which could not be computed."""
    try:
        from pycel import ExcelCompiler
    except ImportError:  # pragma: no cover - pycel is a dependency
        return [f"{len(pending)} formula cells have no cached value and pycel is not installed"]
    failed: list[str] = []
    # pycel logs a traceback per failing formula; the note below says it once.
    logging.getLogger("pycel").setLevel(logging.CRITICAL)
    # pycel builds Python ASTs with node types 3.12 deprecates; that is pycel's business, not the user's.
    with tempfile.TemporaryDirectory(prefix="tackroom-xlsx-") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        file = Path(tmp) / "book.xlsx"
        file.write_bytes(data)
        try:
            compiler = ExcelCompiler(filename=str(file))
        except Exception as exc:
            return [f"formula evaluation unavailable ({type(exc).__name__}: {exc})"]
        for sheet, coordinate in pending:
            try:
                value = compiler.evaluate(f"'{sheet}'!{coordinate}")
            except Exception:
                failed.append(f"{sheet}!{coordinate}")
                continue
            if _is_excel_error(value):
                failed.append(f"{sheet}!{coordinate}")
                sheets[sheet][coordinate].value = str(value)
                continue
            cell = sheets[sheet][coordinate]
            cell.value = plain_value(_unwrap(value))
            cell.source = "evaluated"
    notes = [f"{len(pending) - len(failed)} formula cells had no cached value and were evaluated with pycel"]
    if failed:
        shown = ", ".join(failed[:10]) + (" …" if len(failed) > 10 else "")
        notes.append(f"{len(failed)} formula cells could not be evaluated: {shown}")
    return notes


def _unwrap(value: Any) -> Any:
    # A formula evaluated to a 1x1 range comes back as a nested tuple.
    while isinstance(value, tuple) and len(value) == 1:
        value = value[0]
    return value


def _is_excel_error(value: Any) -> bool:
    from pycel.excelutil import ERROR_CODES

    return isinstance(value, str) and value in ERROR_CODES


# -- docx ------------------------------------------------------------------------------
def _read_docx(data: bytes) -> TextDocument:
    import docx
    from docx.table import Table

    document = docx.Document(io.BytesIO(data))
    lines: list[str] = []
    tables = 0
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            tables += 1
            for row in block.rows:
                lines.append("| " + " | ".join(cell.text.strip() for cell in row.cells) + " |")
        else:
            lines.append(block.text)
    notes = [f"{tables} tables rendered as '| a | b |' rows"] if tables else []
    return TextDocument(format="docx", lines=lines, notes=notes)


# -- pdf -------------------------------------------------------------------------------
def _read_pdf(data: bytes, options: ReaderOptions) -> TextDocument:
    import pdfplumber

    lines: list[str] = []
    notes: list[str] = []
    with pdfplumber.open(io.BytesIO(data)) as pdf:
        pages = pdf.pages
        if len(pages) > options.max_pdf_pages:
            notes.append(f"read the first {options.max_pdf_pages} of {len(pages)} pages")
        for number, page in enumerate(pages[: options.max_pdf_pages], start=1):
            text = page.extract_text(layout=options.pdf_layout) or ""
            lines.append(f"--- page {number} ---")
            page_lines = [line.rstrip() for line in text.splitlines()]
            # Layout mode pads the page with blank lines top and bottom.
            while page_lines and not page_lines[-1]:
                page_lines.pop()
            while page_lines and not page_lines[0]:
                page_lines.pop(0)
            lines.extend(page_lines)
    return TextDocument(format="pdf", lines=lines, notes=notes)
