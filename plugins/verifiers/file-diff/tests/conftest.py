"""Real documents of every format, built with the libraries that write them in the wild."""

from __future__ import annotations

import io
import re
import tarfile
import zipfile
from collections.abc import Callable

import pytest


def xlsx_bytes(sheets: dict[str, dict[str, object]], cached: dict[str, object] | None = None) -> bytes:
    """A workbook written by openpyxl. Formula cells get no cached value (as from any library),
    unless ``cached`` gives one per ``Sheet!A1``: then the value is written into the sheet XML
    the way Excel and LibreOffice store it (``<c><f>…</f><v>…</v></c>``)."""
    from openpyxl import Workbook

    wb = Workbook()
    wb.remove(wb.active)
    for name, cells in sheets.items():
        ws = wb.create_sheet(name)
        for coordinate, value in cells.items():
            ws[coordinate] = value
    buf = io.BytesIO()
    wb.save(buf)
    data = buf.getvalue()
    if not cached:
        return data
    order = list(sheets)
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            content = src.read(item.filename)
            match = re.fullmatch(r"xl/worksheets/sheet(\d+)\.xml", item.filename)
            if match:
                sheet = order[int(match.group(1)) - 1]
                xml = content.decode()
                for key, value in cached.items():
                    s, coordinate = key.split("!")
                    if s != sheet:
                        continue
                    pattern = re.compile(rf'(<c r="{coordinate}"[^>]*>)(<f>.*?</f>)(<v\s*/>|<v></v>)?')
                    xml, n = pattern.subn(lambda m, value=value: f"{m.group(1)}{m.group(2)}<v>{value}</v>", xml)
                    assert n == 1, f"no formula cell {key} in {item.filename}"
                content = xml.encode()
            dst.writestr(item, content)
    return out.getvalue()


def docx_bytes(paragraphs: list[str], table: list[list[str]] | None = None, heading: str | None = None) -> bytes:
    import docx

    document = docx.Document()
    if heading:
        document.add_heading(heading, level=1)
    for text in paragraphs:
        document.add_paragraph(text)
    if table:
        t = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                t.cell(r, c).text = value
    buf = io.BytesIO()
    document.save(buf)
    return buf.getvalue()


def pdf_bytes(pages: list[list[str]], columns: list[tuple[str, str]] | None = None) -> bytes:
    """A PDF written by fpdf2; ``columns`` adds rows of two left/right columns on the first page."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("Helvetica", size=12)
    for i, lines in enumerate(pages):
        pdf.add_page()
        for line in lines:
            pdf.cell(0, 10, line, new_x="LMARGIN", new_y="NEXT")
        if i == 0 and columns:
            for left, right in columns:
                y = pdf.get_y()
                pdf.set_xy(10, y)
                pdf.cell(80, 10, left)
                pdf.set_xy(120, y)
                pdf.cell(80, 10, right, new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())


def tar_of(files: dict[str, bytes | str]) -> bytes:
    """A tar as ``Sandbox.snapshot`` makes it (member names without the leading '/')."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def make_xlsx() -> Callable[..., bytes]:
    return xlsx_bytes


@pytest.fixture
def make_docx() -> Callable[..., bytes]:
    return docx_bytes


@pytest.fixture
def make_pdf() -> Callable[..., bytes]:
    return pdf_bytes


@pytest.fixture
def make_tar() -> Callable[..., bytes]:
    return tar_of
