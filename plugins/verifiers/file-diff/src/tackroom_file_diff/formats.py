"""Which reader a file gets: by extension first, then by whether its bytes are text."""

from __future__ import annotations

import posixpath
from typing import Literal

FileFormat = Literal["text", "json", "csv", "xlsx", "docx", "pdf", "binary"]
FORMATS: tuple[FileFormat, ...] = ("text", "json", "csv", "xlsx", "docx", "pdf", "binary")

_BY_EXTENSION: dict[str, FileFormat] = {
    ".csv": "csv",
    ".tsv": "csv",
    ".xlsx": "xlsx",
    ".xlsm": "xlsx",
    ".docx": "docx",
    ".pdf": "pdf",
    ".json": "json",
}


def detect_format(path: str, data: bytes) -> FileFormat:
    """The format of ``path``: a known extension wins; otherwise UTF-8 without NUL bytes is text."""
    ext = posixpath.splitext(path)[1].lower()
    if ext in _BY_EXTENSION:
        return _BY_EXTENSION[ext]
    return "text" if is_text(data) else "binary"


def is_text(data: bytes) -> bool:
    sample = data[:65536]
    if b"\x00" in sample:
        return False
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut by the sample boundary is still text.
        return exc.start >= len(sample) - 3
    return True


def decode_text(data: bytes) -> str:
    """UTF-8 (a BOM is dropped), falling back to Latin-1 so any bytes decode."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("latin-1")
