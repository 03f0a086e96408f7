"""Build the Acme world's files and its tasks' reference answers, reproducibly.

    uv run python examples/worlds/acme/build_world.py

Writes ``files/`` (what the agent's tools see, mounted at /workspace) and, for
each task under ``tasks/``, the answer files its ``expected/`` folder and its
oracle ``solution/`` need. Every number comes from a seeded generator, so a
re-run produces the same content; the generated files are committed.
Needs openpyxl, python-docx and fpdf2 (all in the workspace's dev tools).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import mailbox
import random
import shutil
from email.message import EmailMessage
from pathlib import Path

import docx
from fpdf import FPDF
from openpyxl import Workbook

HERE = Path(__file__).resolve().parent
FILES = HERE / "files"
TASKS = HERE / "tasks"
FIXED = dt.datetime(2024, 10, 1, 9, 0, 0)
REGIONS = ("East", "North", "South", "West")
PRODUCTS = {"Widget": 120.0, "Gadget": 75.0, "Gizmo": 240.0}
DEPARTMENTS = ("Engineering", "Finance", "Operations", "Sales")
FIRST = ["Ava", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jon", "Kara", "Liam", "Mina",
         "Noah", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tara", "Uma", "Victor", "Wen", "Yusuf"]
LAST = ["Okafor", "Brandt", "Dubois", "Patel", "Rossi", "Haddad", "Kim", "Tanaka", "Silva", "Berg", "Novak",
        "Walsh", "Sato", "Cohen", "Aziz", "Natarajan", "Reyes", "Costa", "Lund", "Moreau", "Iyer", "Hale", "Zhou", "Demir"]


# -- data -----------------------------------------------------------------------------
def sales_rows(rng: random.Random) -> list[list]:
    rows = []
    for month in ("2024-07", "2024-08", "2024-09"):
        for region in REGIONS:
            for product, price in PRODUCTS.items():
                units = rng.randint(40, 400)
                rows.append([month, region, product, units, price, round(units * price, 2)])
    return rows


def employees(rng: random.Random) -> list[dict]:
    people = []
    for i, (first, last) in enumerate(zip(FIRST, LAST, strict=True), start=101):
        dept = DEPARTMENTS[(i * 7) % len(DEPARTMENTS)] if (first, last) != ("Priya", "Natarajan") else "Engineering"
        start = dt.date(2015 + rng.randint(0, 9), rng.randint(1, 12), rng.randint(1, 28))
        people.append({
            "id": i, "name": f"{first} {last}", "email": f"{first.lower()}.{last.lower()}@acme-widgets.example",
            "department": dept, "title": rng.choice(["Analyst", "Engineer", "Manager", "Specialist", "Lead"]),
            "start_date": start.isoformat(), "salary": rng.randrange(60_000, 160_000, 500),
        })
    return people


def expenses(rng: random.Random) -> list[dict]:
    rows = []
    categories = ["Travel", "Meals", "Software", "Hardware", "Training", "Office"]
    for i in range(1, 41):
        day = dt.date(2024, 1, 1) + dt.timedelta(days=rng.randint(0, 270))
        amount = round(rng.choice([rng.uniform(15, 300), rng.uniform(300, 900)]), 2)
        rows.append({"id": f"EXP-{i:03d}", "date": day.isoformat(), "department": rng.choice(DEPARTMENTS),
                     "category": rng.choice(categories), "amount": f"{amount:.2f}"})
    return rows


# -- writers ------------------------------------------------------------------------------
def write_xlsx(path: Path, sheets: dict[str, list[list]]) -> None:
    wb = Workbook()
    wb.remove(wb.active)
    for name, rows in sheets.items():
        ws = wb.create_sheet(name)
        for row in rows:
            ws.append(row)
    wb.properties.creator = "Acme Widgets"
    wb.properties.created = FIXED
    wb.properties.modified = FIXED
    path.parent.mkdir(parents=True, exist_ok=True)
    wb.save(path)


def write_csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def write_handbook(path: Path) -> None:
    doc = docx.Document()
    doc.core_properties.author = "Acme People Team"
    doc.core_properties.created = FIXED
    doc.core_properties.modified = FIXED
    doc.add_heading("Acme Widgets Employee Handbook", level=0)
    doc.add_heading("Paid time off", level=1)
    doc.add_paragraph("Employees with fewer than 5 years of service receive 20 PTO days per calendar year. "
                      "Employees with 5 or more years of service receive 25 PTO days per calendar year.")
    doc.add_paragraph("Up to 5 unused PTO days may be carried over into the next year.")
    doc.add_heading("Expenses", level=1)
    doc.add_paragraph("Any single expense above $500.00 requires written approval from a vice president "
                      "before it is reimbursed. Expenses of $500.00 or less are approved by the line manager.")
    doc.add_heading("Remote work", level=1)
    doc.add_paragraph("Staff may work remotely up to 3 days per week with their manager's agreement.")
    table = doc.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text, table.rows[0].cells[1].text = "Policy owner", "Contact"
    for owner, contact in (("People Team", "people@acme-widgets.example"), ("Finance", "finance@acme-widgets.example")):
        cells = table.add_row().cells
        cells[0].text, cells[1].text = owner, contact
    path.parent.mkdir(parents=True, exist_ok=True)
    doc.save(str(path))


def write_pdf(path: Path, title: str, paragraphs: list[str]) -> None:
    pdf = FPDF()
    pdf.set_title(title)
    pdf.set_creation_date(FIXED.replace(tzinfo=dt.UTC))
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 15)
    pdf.multi_cell(0, 9, title)
    pdf.set_font("Helvetica", size=11)
    for text in paragraphs:
        pdf.ln(3)
        pdf.multi_cell(0, 6, text)
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(path))


def message(frm: str, to: str, subject: str, date: dt.datetime, body: str, msgid: str) -> EmailMessage:
    m = EmailMessage()
    m["From"], m["To"], m["Subject"] = frm, to, subject
    m["Date"] = date.strftime("%a, %d %b %Y %H:%M:%S +0000")
    m["Message-ID"] = f"<{msgid}@acme-widgets.example>"
    m.set_content(body)
    return m


def write_mbox(path: Path, messages: list[EmailMessage]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    box = mailbox.mbox(str(path))
    for m in messages:
        box.add(mailbox.mboxMessage(m))
    box.flush()
    box.close()
    # mbox "From " lines carry the current time; pin them so the file is reproducible.
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join("From MAILER-DAEMON Tue Oct  1 09:00:00 2024\n" if ln.startswith("From ") else ln for ln in lines))


# -- the world ------------------------------------------------------------------------------
def build() -> dict:
    rng = random.Random(20241001)
    if FILES.exists():
        shutil.rmtree(FILES)
    sales = sales_rows(rng)
    write_xlsx(FILES / "finance/q3_sales.xlsx", {
        "Sales": [["Month", "Region", "Product", "Units", "Unit Price", "Revenue"], *sales],
        "Targets": [["Region", "Q3 Target"], *[[r, 150_000 + 10_000 * i] for i, r in enumerate(REGIONS)]],
    })
    staff = employees(rng)
    write_csv(FILES / "hr/employees.csv", staff)
    exp = expenses(rng)
    write_csv(FILES / "finance/expenses_2024.csv", exp)
    write_handbook(FILES / "hr/handbook.docx")
    write_pdf(FILES / "legal/northwind_supply_agreement.pdf", "Supply Agreement: Acme Widgets and Northwind Metals", [
        "This Supply Agreement is entered into on March 1, 2023 between Acme Widgets Inc. (\"Buyer\") and "
        "Northwind Metals LLC (\"Supplier\").",
        "1. Term. The agreement runs for an initial term of two years and renews automatically on March 1, 2025 "
        "for successive one-year terms.",
        "2. Fees. Buyer pays Supplier an annual platform fee of $48,000, invoiced quarterly, plus the unit prices "
        "in Schedule A.",
        "3. Renewal notice. Either party may prevent renewal by written notice given at least 60 days before the "
        "renewal date.",
        "4. Termination. Either party may terminate for material breach not cured within 30 days of notice.",
        "5. Governing law. This agreement is governed by the laws of the State of Ohio.",
    ])
    write_pdf(FILES / "reports/board_update_q2.pdf", "Board Update: Q2 2024", [
        "Q2 revenue grew 8% over Q1, led by the Gizmo product line.",
        "Headcount ended the quarter at 24. Two Engineering hires are planned for Q3.",
        "Risks: supplier concentration (Northwind Metals supplies 70% of raw steel).",
    ])
    (FILES / "projects").mkdir(parents=True, exist_ok=True)
    (FILES / "projects/roadmap.md").write_text(
        "# Product roadmap (H2 2024)\n\n"
        "| Project | Owner | Target date | Status |\n|---|---|---|---|\n"
        "| Falcon (new Gizmo line) | Priya Natarajan | 2024-11-15 | on track |\n"
        "| Heron (warehouse scanner app) | Farid Haddad | 2024-12-01 | at risk |\n"
        "| Osprey (EU distributor portal) | Mina Sato | 2025-02-01 | planning |\n\n"
        "Owners report status every Monday in #engineering.\n")
    (FILES / "README.md").write_text(
        "# Acme Widgets shared drive\n\nfinance/ sales and expenses; hr/ people data and the handbook; legal/ contracts; "
        "projects/ roadmap; reports/ board updates; mail/ the ops mailbox (mbox); chat/ team channels (json).\n"
        "Put deliverables in output/.\n")
    (FILES / "output").mkdir(parents=True, exist_ok=True)
    (FILES / "output/.keep").write_text("")
    write_mbox(FILES / "mail/inbox.mbox", [
        message("dana@brightline.example", "ops@acme-widgets.example", "Where is order #4471?",
                dt.datetime(2024, 10, 14, 15, 2), "Hi Acme team,\n\nOur order #4471 (300 Widgets) was due last week "
                "and we have not received a shipping date. Could you tell us when it will ship?\n\nThanks,\nDana Whitfield\n"
                "Brightline Retail", "m1"),
        message("it@acme-widgets.example", "ops@acme-widgets.example", "Scheduled maintenance Saturday",
                dt.datetime(2024, 10, 13, 8, 30), "The file server will be offline Saturday 06:00-08:00 UTC.", "m2"),
        message("finance@acme-widgets.example", "ops@acme-widgets.example", "Q3 close checklist",
                dt.datetime(2024, 10, 11, 10, 15), "Please send the Q3 revenue by region by Friday.", "m3"),
        message("sam.lund@acme-widgets.example", "ops@acme-widgets.example", "Re: Heron demo",
                dt.datetime(2024, 10, 10, 17, 45), "The Heron demo moved to next Thursday.", "m4"),
    ])
    write_mbox(FILES / "mail/sent.mbox", [])
    chat = {
        "general": [
            {"ts": "2024-10-14 09:00", "user": "grace.kim", "text": "Reminder: all-hands on Thursday at 16:00."},
        ],
        "sales": [
            {"ts": "2024-10-11 11:20", "user": "rosa.costa", "text": "Brightline asked about order 4470, it shipped Tuesday."},
            {"ts": "2024-10-14 16:40", "user": "jon.berg", "text": "Update: order 4471 ships on 2024-10-18 from the Dayton warehouse (steel delay at Northwind)."},
            {"ts": "2024-10-15 09:05", "user": "rosa.costa", "text": "Order 4475 is on hold until the customer confirms the address."},
        ],
        "engineering": [
            {"ts": "2024-10-14 09:30", "user": "priya.natarajan", "text": "Falcon: tooling tests done. No blockers."},
            {"ts": "2024-10-14 09:32", "user": "farid.haddad", "text": "Heron: blocked on ENG-212 (scanner SDK license not renewed)."},
            {"ts": "2024-10-14 09:35", "user": "mina.sato", "text": "Osprey: waiting for EU legal review."},
            {"ts": "2024-10-14 09:41", "user": "wen.zhou", "text": "Infra: blocked on ENG-219, the staging database is out of disk."},
        ],
    }
    for name, msgs in chat.items():
        p = FILES / f"chat/{name}.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(msgs, indent=2) + "\n")
    return {"sales": sales, "staff": staff, "expenses": exp}


# -- the tasks' answers ---------------------------------------------------------------------
def put(task: str, rel: str, data: str | bytes, *, solution: bool = True) -> None:
    """An expected output (at its sandbox path under expected/) and the oracle's copy of it."""
    targets = [TASKS / task / "expected" / rel.lstrip("/")]
    if solution:
        targets.append(TASKS / task / "solution/files" / rel.lstrip("/"))
    for t in targets:
        t.parent.mkdir(parents=True, exist_ok=True)
        t.write_bytes(data.encode() if isinstance(data, str) else data)


def answers(world: dict) -> None:
    by_region: dict[str, float] = {}
    for _, region, _, _, _, revenue in world["sales"]:
        by_region[region] = by_region.get(region, 0.0) + revenue
    put("q3-revenue-by-region", "/workspace/output/revenue_by_region.csv",
        "region,revenue\n" + "".join(f"{r},{by_region[r]:.2f}\n" for r in sorted(by_region)))

    counts: dict[str, int] = {}
    for p in world["staff"]:
        counts[p["department"]] = counts.get(p["department"], 0) + 1
    buf = io.BytesIO()
    wb = Workbook()
    ws = wb.active
    ws.title = "Headcount"
    ws.append(["Department", "Employees"])
    for d in sorted(counts):
        ws.append([d, counts[d]])
    wb.properties.created = wb.properties.modified = FIXED
    wb.save(buf)
    put("headcount-by-department", "/workspace/output/headcount.xlsx", buf.getvalue())

    put("pto-days-senior", "/workspace/output/answer.txt", "25\n")
    put("northwind-contract-terms", "/workspace/output/northwind_terms.json",
        json.dumps({"annual_fee": 48000, "notice_days": 60, "renewal_date": "2025-03-01"}, indent=2) + "\n")

    over = [e for e in world["expenses"] if float(e["amount"]) > 500]
    put("expenses-over-limit", "/workspace/output/over_limit.csv",
        "id,date,department,amount\n" + "".join(f"{e['id']},{e['date']},{e['department']},{e['amount']}\n" for e in over))

    owner = next(p for p in world["staff"] if p["name"] == "Priya Natarajan")
    put("falcon-owner-email", "/workspace/output/falcon_owner.txt", owner["email"] + "\n")

    total = sum(by_region.values())
    top = max(by_region, key=by_region.get)
    doc = docx.Document()
    doc.core_properties.created = doc.core_properties.modified = FIXED
    doc.add_heading("Q3 Sales Summary", level=0)
    doc.add_paragraph(f"Total Q3 2024 revenue was ${total:,.2f}.")
    doc.add_paragraph(f"The top region was {top} with ${by_region[top]:,.2f}.")
    buf = io.BytesIO()
    doc.save(buf)
    put("q3-memo-docx", "/workspace/output/q3_memo.docx", buf.getvalue())
    facts = {"total_revenue": round(total, 2), "top_region": top}
    (TASKS / "q3-memo-docx/tests").mkdir(parents=True, exist_ok=True)
    (TASKS / "q3-memo-docx/tests/facts.json").write_text(json.dumps(facts, indent=2) + "\n")


if __name__ == "__main__":
    world = build()
    answers(world)
    n = sum(1 for p in FILES.rglob("*") if p.is_file())
    print(f"wrote {n} world files under {FILES} and the tasks' answers under {TASKS}")
