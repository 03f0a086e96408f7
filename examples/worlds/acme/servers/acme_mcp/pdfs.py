"""PDF app: page count, text per page, and search (pypdf)."""

from __future__ import annotations

from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pypdf import PdfReader

from acme_mcp.paths import WorldPaths, root_from_env


def build_server(root: Path) -> MCPServer:
    paths = WorldPaths(root)
    server = MCPServer("pdfs", instructions="PDF files in the workspace (read only).")

    def reader(path: str) -> PdfReader:
        full = paths.resolve(path)
        if full.suffix.lower() != ".pdf":
            raise ToolError(f"{path!r} is not a .pdf file")
        return PdfReader(str(full))

    @server.tool()
    def pdf_info(path: str) -> str:
        """Number of pages and the document title of a PDF."""
        pdf = reader(path)
        title = (pdf.metadata.title if pdf.metadata else None) or "(no title)"
        return f"pages: {len(pdf.pages)}\ntitle: {title}"

    @server.tool()
    def read_pdf(path: str, first_page: int = 1, last_page: int | None = None) -> str:
        """Extract the text of pages first_page..last_page (1-based, inclusive; all pages by default)."""
        pdf = reader(path)
        n = len(pdf.pages)
        last = n if last_page is None else min(last_page, n)
        if first_page < 1 or first_page > last:
            raise ToolError(f"pages run from 1 to {n}; got {first_page}..{last_page}")
        out = []
        for i in range(first_page - 1, last):
            out.append(f"--- page {i + 1} ---\n{pdf.pages[i].extract_text() or ''}")
        return "\n".join(out)

    @server.tool()
    def search_pdf(path: str, query: str) -> str:
        """Lines of the PDF that contain the query (case-insensitive), with their page numbers."""
        pdf = reader(path)
        hits = []
        for i, page in enumerate(pdf.pages, 1):
            for line in (page.extract_text() or "").splitlines():
                if query.lower() in line.lower():
                    hits.append(f"p{i}: {line.strip()}")
        return "\n".join(hits) or f"{query!r} does not occur in the PDF"

    return server


if __name__ == "__main__":
    build_server(root_from_env()).run("stdio")
