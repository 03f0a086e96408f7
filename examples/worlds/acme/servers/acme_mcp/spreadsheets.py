"""Spreadsheets app: read and write xlsx workbooks (openpyxl)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from openpyxl import Workbook, load_workbook

from acme_mcp.paths import WorldPaths, root_from_env

MAX_ROWS = 500


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def build_server(root: Path) -> MCPServer:
    paths = WorldPaths(root)
    server = MCPServer("spreadsheets", instructions="Excel workbooks (.xlsx) in the workspace.")

    def open_book(path: str, data_only: bool = True):
        full = paths.resolve(path)
        if full.suffix.lower() not in (".xlsx", ".xlsm"):
            raise ToolError(f"{path!r} is not an .xlsx workbook")
        return full, load_workbook(full, data_only=data_only)

    @server.tool()
    def list_sheets(path: str) -> str:
        """List the sheets of a workbook with their sizes (rows x columns)."""
        _, wb = open_book(path)
        return "\n".join(f"{ws.title}: {ws.max_row} rows x {ws.max_column} columns" for ws in wb.worksheets)

    @server.tool()
    def read_sheet(path: str, sheet: str | None = None, max_rows: int = 100) -> str:
        """Read a sheet as comma-separated rows (first sheet by default). Formulas show their cached values."""
        _, wb = open_book(path)
        if sheet is not None and sheet not in wb.sheetnames:
            raise ToolError(f"no sheet {sheet!r}; sheets are {', '.join(wb.sheetnames)}")
        ws = wb[sheet] if sheet else wb.worksheets[0]
        limit = max(1, min(max_rows, MAX_ROWS))
        rows = []
        for i, row in enumerate(ws.iter_rows(values_only=True)):
            if i >= limit:
                rows.append(f"... ({ws.max_row - limit} more rows)")
                break
            rows.append(",".join(_cell(v) for v in row))
        return "\n".join(rows) or "(empty sheet)"

    @server.tool()
    def write_sheet(path: str, sheet: str, rows: list[list[str | float | int | None]]) -> str:
        """Write rows into a sheet from A1 (creates the workbook and the sheet when missing; replaces the sheet's cells)."""
        full = paths.resolve(path, must_exist=False)
        if full.suffix.lower() != ".xlsx":
            raise ToolError("the path must end in .xlsx")
        if full.exists():
            wb = load_workbook(full)
        else:
            full.parent.mkdir(parents=True, exist_ok=True)
            wb = Workbook()
            wb.remove(wb.active)
        if sheet in wb.sheetnames:
            wb.remove(wb[sheet])
        ws = wb.create_sheet(sheet)
        for row in rows:
            ws.append(list(row))
        wb.save(full)
        return f"wrote {len(rows)} rows to sheet {sheet!r} of {paths.show(full)}"

    @server.tool()
    def sum_column(path: str, column: str, sheet: str | None = None, group_by: str | None = None) -> str:
        """Sum a numeric column (by header name), optionally grouped by another column's values."""
        _, wb = open_book(path)
        ws = wb[sheet] if sheet else wb.worksheets[0]
        rows = list(ws.iter_rows(values_only=True))
        if not rows:
            raise ToolError("the sheet is empty")
        header = [str(h) for h in rows[0]]
        for name in [column] + ([group_by] if group_by else []):
            if name not in header:
                raise ToolError(f"no column {name!r}; columns are {', '.join(header)}")
        ci = header.index(column)
        gi = header.index(group_by) if group_by else None
        totals: dict[str, float] = {}
        for row in rows[1:]:
            value = row[ci]
            if not isinstance(value, (int, float)):
                continue
            key = str(row[gi]) if gi is not None else "total"
            totals[key] = totals.get(key, 0.0) + float(value)
        return "\n".join(f"{k},{_cell(round(v, 2))}" for k, v in sorted(totals.items()))

    return server


if __name__ == "__main__":
    build_server(root_from_env()).run("stdio")
