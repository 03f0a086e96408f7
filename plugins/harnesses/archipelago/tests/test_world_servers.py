"""Each Acme MCP server on its own, through a real MCP SDK client, on a copy of the world's files."""

from __future__ import annotations

import json
import mailbox
import shutil
import sys

import pytest
from acme_mcp import chat, code, documents, filesystem, mail, pdfs, spreadsheets
from archipelago_paths import WORLD
from mcp import Client, StdioServerParameters
from openpyxl import load_workbook


@pytest.fixture
def root(tmp_path, monkeypatch):
    dest = tmp_path / "workspace"
    shutil.copytree(WORLD / "files", dest)
    monkeypatch.setenv("WORLD_MOUNT", "/workspace")
    return dest


async def call(server, tool: str, **args):
    async with Client(server) as client:
        result = await client.call_tool(tool, args)
    return result.is_error, "\n".join(b.text for b in result.content)


async def test_filesystem_lists_reads_writes_and_stays_inside(root):
    fs = filesystem.build_server(root)
    err, text = await call(fs, "list_directory", path="/workspace/hr")
    assert not err and "employees.csv" in text and "handbook.docx" in text
    err, text = await call(fs, "write_text_file", path="output/note.md", content="hi")
    assert not err and (root / "output/note.md").read_text() == "hi"
    err, text = await call(fs, "read_text_file", path="../../etc/passwd")
    assert err and "outside the workspace" in text
    err, text = await call(fs, "read_text_file", path="finance/q3_sales.xlsx")
    assert err and "not a text file" in text
    err, text = await call(fs, "search_files", pattern="*.pdf")
    assert text.splitlines() == ["/workspace/legal/northwind_supply_agreement.pdf", "/workspace/reports/board_update_q2.pdf"]


async def test_spreadsheets_read_sum_and_write(root):
    sheets = spreadsheets.build_server(root)
    _, text = await call(sheets, "list_sheets", path="finance/q3_sales.xlsx")
    assert text.splitlines() == ["Sales: 37 rows x 6 columns", "Targets: 5 rows x 2 columns"]
    _, text = await call(sheets, "sum_column", path="finance/q3_sales.xlsx", column="Revenue", group_by="Region")
    assert text.splitlines() == ["East,209355", "North,212595", "South,365550", "West,372435"]
    err, text = await call(sheets, "read_sheet", path="finance/q3_sales.xlsx", sheet="Nope")
    assert err and "Sales, Targets" in text
    await call(sheets, "write_sheet", path="output/h.xlsx", sheet="Headcount", rows=[["Department", "Employees"], ["Sales", 6]])
    ws = load_workbook(root / "output/h.xlsx")["Headcount"]
    assert [list(r) for r in ws.iter_rows(values_only=True)] == [["Department", "Employees"], ["Sales", 6]]


async def test_documents_read_and_create(root):
    docs = documents.build_server(root)
    _, text = await call(docs, "read_document", path="hr/handbook.docx")
    assert "# Acme Widgets Employee Handbook" in text and "25 PTO days" in text and "[table 1]" in text
    await call(docs, "create_document", path="output/memo.docx", title="Q3 Sales Summary", paragraphs=["Total: $1."])
    _, text = await call(docs, "read_document", path="output/memo.docx")
    assert text.splitlines() == ["# Q3 Sales Summary", "Total: $1."]


async def test_pdfs_read_and_search(root):
    pdf = pdfs.build_server(root)
    _, text = await call(pdf, "pdf_info", path="legal/northwind_supply_agreement.pdf")
    assert "pages: 1" in text and "Northwind" in text
    _, text = await call(pdf, "search_pdf", path="legal/northwind_supply_agreement.pdf", query="annual platform fee")
    assert "$48,000" in text and text.startswith("p1:")
    err, text = await call(pdf, "read_pdf", path="legal/northwind_supply_agreement.pdf", first_page=3)
    assert err and "pages run from 1 to 1" in text


async def test_mail_lists_reads_and_sends(root):
    m = mail.build_server(root)
    _, text = await call(m, "list_messages", search="4471")
    assert text.startswith("[0]") and "dana@brightline.example" in text
    _, text = await call(m, "read_message", message_id=0)
    assert "order #4471" in text
    err, _ = await call(m, "send_message", to="dana@brightline.example", subject="Re: order", body="Ships 2024-10-18.")
    assert not err
    sent = list(mailbox.mbox(str(root / "mail/sent.mbox")))
    assert sent[0]["to"] == "dana@brightline.example" and "2024-10-18" in sent[0].get_payload()


async def test_chat_reads_searches_and_posts(root):
    c = chat.build_server(root)
    _, text = await call(c, "search_messages", query="4471")
    assert "#sales" in text and "2024-10-18" in text
    await call(c, "post_message", channel="#general", text="ENG-212 and ENG-219 are blocking.")
    assert json.loads((root / "chat/general.json").read_text())[-1]["user"] == "ops-bot"
    err, text = await call(c, "read_channel", channel="random")
    assert err and "engineering, general, sales" in text


async def test_code_runs_python_in_the_workspace_with_a_time_limit(root):
    c = code.build_server(root)
    async with Client(c) as client:
        tools = (await client.list_tools()).tools
        assert list(tools[0].input_schema["properties"]) == ["request"]  # the envelope shape the harness hoists
        ok = await client.call_tool("run_python", {"request": {"code": "import os; print(sorted(os.listdir('.'))[:2])"}})
        slow = await client.call_tool("run_python", {"request": {"code": "import time; time.sleep(5)", "timeout_seconds": 1}})
    assert "exit code 0" in ok.content[0].text and "README.md" in ok.content[0].text
    assert "timed out after 1s" in slow.content[0].text


async def test_a_server_runs_alone_over_stdio(root):
    params = StdioServerParameters(command=sys.executable, args=["-m", "acme_mcp.pdfs"],
                                   env={"WORLD_ROOT": str(root), "PYTHONPATH": str(WORLD / "servers")})
    async with Client(params) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        result = await client.call_tool("search_pdf", {"path": "reports/board_update_q2.pdf", "query": "headcount"})
    assert names == ["pdf_info", "read_pdf", "search_pdf"]
    assert "24" in result.content[0].text
