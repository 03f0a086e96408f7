"""`tackroom view` in a real browser: Debian's Chromium driven by Playwright (never a downloaded browser) over run
folders the tests made with tackroom's own writers (conftest.py)."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tackroom.testing import skip_or_fail

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.slow


def serve(root: Path) -> Iterator[str]:
    import uvicorn

    from tackroom_viewer import create_app

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(root), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the viewer did not start"
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium under Playwright; skipped with a reason where it is missing, a failure under CI."""
    if CHROMIUM is None:
        skip_or_fail("chromium is not installed (scripts/setup installs it: apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        skip_or_fail("playwright is not installed (uv sync installs it: the workspace's dev group)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def viewer(runs_root) -> Iterator[str]:
    yield from serve(runs_root)


@pytest.fixture
def page(browser):
    context = browser.new_context()
    p = context.new_page()
    p.dialogs = []
    p.on("dialog", lambda d: (p.dialogs.append(d.message), d.dismiss()))
    yield p
    context.close()


def hostile_did_nothing(page) -> None:
    """Nothing of the model's markup ran or became an element; it shows as text."""
    assert page.evaluate("window.__pwned") is None
    assert page.title() != "pwned"
    assert page.locator("#injected").count() == 0
    assert page.dialogs == []
    assert "<script>document.title" in page.inner_text("body")


def test_the_payload_runs_when_not_escaped(page):
    # the markup the model writes is live in this browser when a page would paste it raw: the checks can fail
    from viewer_runs import HOSTILE

    page.set_content(f"<html><body>{HOSTILE}</body></html>")
    page.wait_for_function("window.__pwned !== undefined")
    assert page.locator("#injected").count() == 1


def test_a_newcomer_opens_the_matrix_and_reads_a_trials_turns_tokens_and_grading(page, viewer):
    page.goto(viewer)
    assert {a.inner_text() for a in page.locator("table a").all()} == {"base", "trained", "matrix-demo", "train-demo"}
    page.get_by_role("link", name="matrix-demo", exact=True).click()
    assert "Matrix cells" in page.inner_text("body")          # matrix.json's cells
    grid = page.locator("table.grid")
    headers = grid.locator("th").all_inner_texts()
    assert any("base" in h for h in headers) and any("tuned" in h for h in headers)
    cells = grid.locator("tr", has_text="say-blue").locator("td.cell")
    assert [c.strip() for c in cells.all_inner_texts()] == ["0/1 · 0.500", "1/1 · 1.000"]
    cells.nth(0).locator("a").click()                         # one trial in the cell: straight to it

    deadline = time.monotonic() + 120  # the run's tokenizer loads in the background; the page says so meanwhile
    while "Decoded with tokenizer smollm2" not in page.inner_text("body"):
        assert "while tokenizer 'smollm2' loads" in page.inner_text("body")
        assert time.monotonic() < deadline, "the tokenizer never loaded"
        time.sleep(1)
        page.reload()
    body = page.inner_text("body")
    assert "__base__" in page.locator("h1").inner_text()
    assert "0.500" in body                                    # reward
    assert "Say blue." in body                                # the turn the model saw
    assert "reward.txt" in body and "exit_code" in body       # the verifier's output
    assert "harness_run" in body                              # timings
    assert "the agent ran offline" in body                    # notes
    tokens = page.locator(".tokens .tok")
    trained = page.locator(".tokens .tok.m1")
    assert tokens.count() > trained.count() > 0               # prompt ids (mask 0) and the model's ids (mask 1)
    assert trained.first.get_attribute("title").endswith(" · logprob -0.5000")
    assert "".join(trained.all_inner_texts()).startswith("blue <script>")  # decoded with the run's tokenizer
    page.locator("details.turn summary").first.click()
    prompt = page.locator("pre.prompt").first.inner_text()
    assert "<|im_start|>user\nSay blue.<|im_end|>" in prompt        # the chat template, as the model saw it
    hostile_did_nothing(page)
    assert page.locator("pre", has_text="<img src=x onerror=").count() >= 2  # the answer and the grader's stdout


def test_the_trial_list_filters(page, viewer):
    page.goto(viewer + "/run/base")
    assert "2 of 2 shown" in page.inner_text("body")
    page.select_option("select[name=error]", "none")
    page.fill("input[name=reward_min]", "0.4")
    page.get_by_role("button", name="filter").click()
    assert "1 of 2 shown" in page.inner_text("body")
    assert page.locator("table tr td a", has_text="say-blue").count() == 1
    page.goto(viewer + "/run/base?reward_max=0.1&harness=answer")
    assert "1 of 2 shown" in page.inner_text("body") and page.locator("td a", has_text="say-red").count() == 1
    page.goto(viewer + "/run/base?error=infra")
    assert "0 of 2 shown" in page.inner_text("body")
    page.goto(viewer + "/run/base?reward_min=lots")
    assert "reward_min: not a number: 'lots'" in page.inner_text("body")


def test_hostile_markup_runs_nowhere(page, viewer):
    for path in ("/run/base", "/run/base?task=say-blue"):
        page.goto(viewer + path)
        assert page.evaluate("window.__pwned") is None and page.locator("#injected").count() == 0
    page.goto(viewer + "/run/base")
    page.locator("a", has_text="say-blue").last.click()
    hostile_did_nothing(page)
    response = page.request.get(page.url)
    assert "script-src" not in response.headers["content-security-policy"]  # default-src 'none': no script at all
    raw = page.locator("a", has_text="trajectory.json").get_attribute("href")
    page.goto(viewer + raw)  # the file as JSON, never rendered as a page
    hostile_did_nothing(page)


def test_two_trials_of_one_task_side_by_side(page, viewer):
    page.goto(viewer + "/run/base?task=say-blue")
    page.locator("table tr td a", has_text="say-blue").first.click()
    page.select_option("select[name=b]", label=next(
        o for o in page.locator("select[name=b] option").all_inner_texts() if o.startswith("trained/")))
    page.get_by_role("button", name="compare").click()
    columns = page.locator(".pair > div")
    assert columns.count() == 2
    left, right = columns.nth(0).inner_text(), columns.nth(1).inner_text()
    assert "__base__" in left and "0.500" in left
    assert "__trained__" in right and "1.000" in right
    hostile_did_nothing(page)


def test_a_training_run_shows_its_curve_and_each_step_links_to_its_trials(page, viewer):
    page.goto(viewer + "/run/train-demo")
    assert page.locator("svg circle").count() == 3           # three steps; the line being appended is skipped
    page.locator("svg a").first.click()                       # step 1's point: batch 1's trials
    assert "1 of 1 shown" in page.inner_text("body")
    assert "rollouts/step00001-" in page.inner_text("body")
    page.locator("table tr td a", has_text="say-blue").first.click()
    assert "1.000" in page.inner_text("body")
    page.goto(viewer + "/run/train-demo")
    rows = page.locator("tr", has_text="no trial folders for batch")
    assert rows.count() == 2                                  # steps 2 and 3 have no trial folders here


def test_a_running_job_shows_up_and_a_half_written_file_is_no_error(page, runs_root, tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    for server in [serve(root)]:
        url = next(server)
        page.goto(url)
        assert "No run folder here yet" in page.inner_text("body")
        shutil.copytree(runs_root / "base", root / "late")
        page.reload()
        page.get_by_role("link", name="late", exact=True).click()
        assert "2 trial(s) found" in page.inner_text("body")
        writing = root / "late" / "say-green-0000000000__answer__late__p0"
        writing.mkdir()
        (writing / "result.json").write_text('{"trial_id": "say-gr')   # being written by another process
        (writing / "trajectory.json").write_text('{"messages": [{"role": "user", "content": "Say green."}]}')
        page.reload()
        assert "3 trial(s) found" in page.inner_text("body") and "no result" in page.inner_text("body")
        page.locator("a", has_text="say-green").click()
        assert "No readable result.json" in page.inner_text("body") and "Say green." in page.inner_text("body")
        server.close()
