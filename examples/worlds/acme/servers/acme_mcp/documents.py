"""Documents app: read and write Word documents (.docx, python-docx)."""

from __future__ import annotations

from pathlib import Path

import docx
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from acme_mcp.paths import WorldPaths, root_from_env


def build_server(root: Path) -> MCPServer:
    paths = WorldPaths(root)
    server = MCPServer("documents", instructions="Word documents (.docx) in the workspace.")

    def open_doc(path: str):
        full = paths.resolve(path)
        if full.suffix.lower() != ".docx":
            raise ToolError(f"{path!r} is not a .docx document")
        return full, docx.Document(str(full))

    @server.tool()
    def read_document(path: str) -> str:
        """Read a .docx: headings are marked with '#', tables are rendered as '|'-separated rows."""
        _, doc = open_doc(path)
        lines = []
        for p in doc.paragraphs:
            if not p.text.strip():
                continue
            style = (p.style.name or "") if p.style is not None else ""
            if style.startswith("Heading") or style == "Title":
                level = 1 if style == "Title" else int(style.rsplit(" ", 1)[-1]) if style[-1].isdigit() else 1
                lines.append("#" * level + " " + p.text)
            else:
                lines.append(p.text)
        for t, table in enumerate(doc.tables, 1):
            lines.append(f"[table {t}]")
            for row in table.rows:
                lines.append(" | ".join(c.text for c in row.cells))
        return "\n".join(lines) or "(empty document)"

    @server.tool()
    def create_document(path: str, title: str, paragraphs: list[str]) -> str:
        """Create (or overwrite) a .docx with a title and body paragraphs."""
        full = paths.resolve(path, must_exist=False)
        if full.suffix.lower() != ".docx":
            raise ToolError("the path must end in .docx")
        full.parent.mkdir(parents=True, exist_ok=True)
        doc = docx.Document()
        doc.add_heading(title, level=0)
        for text in paragraphs:
            doc.add_paragraph(text)
        doc.save(str(full))
        return f"created {paths.show(full)} with {len(paragraphs)} paragraphs"

    @server.tool()
    def append_paragraph(path: str, text: str) -> str:
        """Append one paragraph to the end of an existing .docx."""
        full, doc = open_doc(path)
        doc.add_paragraph(text)
        doc.save(str(full))
        return f"appended a paragraph to {paths.show(full)}"

    return server


if __name__ == "__main__":
    build_server(root_from_env()).run("stdio")
