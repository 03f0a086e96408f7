"""The viewer's routes and folder reading, without a browser: what is refused, what is tolerated, what is sent.

Folders here are written with tackroom's own models (TrialResult.dump(), Trajectory); the browser tests use
folders made by real runs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from tackroom import Trajectory, TrialResult
from tackroom_viewer import create_app, find_runs
from tackroom_viewer.run_folders import read_jsonl


def write_trial(run: Path, name: str, **result) -> Path:
    folder = run / name
    folder.mkdir(parents=True)
    fields = {"trial_id": name, "task": "t", "harness": "h", "sandbox": "local", "verifier": "test-script", **result}
    (folder / "result.json").write_text(json.dumps(TrialResult(**fields).dump()))
    (folder / "trajectory.json").write_text(Trajectory(messages=[{"role": "user", "content": "hi"}]).model_dump_json())
    return folder


@pytest.fixture
def root(tmp_path) -> Path:
    runs = tmp_path / "runs"
    (runs / "r1").mkdir(parents=True)
    (runs / "r1" / "run.json").write_text("{}")
    write_trial(runs / "r1", "t__h__p0", reward=1.0)
    write_trial(runs / "r1", "t__h__p1", reward=0.0, error={"class": "infra", "type": "X", "message": "m", "phase": "p"})
    return runs


def client(root: Path, host: str = "127.0.0.1") -> TestClient:
    return TestClient(create_app(root), base_url=f"http://{host}")


def test_every_page_forbids_script_and_sniffing(root):
    c = client(root)
    for url in ("/", "/run/r1", "/trial/r1/t__h__p0", "/compare?a=r1/t__h__p0&b=r1/t__h__p1", "/run/nope"):
        r = c.get(url)
        csp = r.headers["content-security-policy"]
        assert csp.startswith("default-src 'none'") and "script-src" not in csp, url
        assert r.headers["x-content-type-options"] == "nosniff"
    raw = c.get("/raw/r1/t__h__p0/trajectory.json")
    assert raw.headers["content-type"] == "application/json" and "sandbox" in raw.headers["content-security-policy"]


def test_another_host_name_is_refused(root):
    # a web page elsewhere cannot read trajectories through DNS rebinding: the Host header must be a local name
    assert client(root, "attacker.example").get("/run/r1").status_code == 400
    assert client(root, "localhost").get("/run/r1").status_code == 200


@pytest.mark.parametrize("url", [
    "/trial/r1/..%2F..%2F..%2Fetc", "/trial/%2Fetc", "/run/..%2F..", "/raw/r1/t__h__p0/run.json",
    "/raw/r1/..%2Frun.json", "/raw/r1/t__h__p0/..%2F..%2Fr1%2Frun.json", "/trial/r1", "/trial/r1/missing",
    "/compare?a=r1/t__h__p0", "/compare?a=r1/t__h__p0&b=..%2F..%2Fetc",
])
def test_nothing_outside_a_trial_folder_is_served(root, url):
    r = client(root).get(url)
    assert r.status_code == 404 and "There is no" in r.text


def test_a_symlink_out_of_the_root_is_not_followed(root, tmp_path):
    outside = write_trial(tmp_path / "elsewhere", "secret__h__p0", reward=1.0).parent
    os.symlink(outside, root / "r1" / "link")
    os.symlink(outside / "secret__h__p0", root / "r1" / "link2")
    c = client(root)
    assert "secret" not in c.get("/run/r1").text
    assert c.get("/trial/r1/link2").status_code == 404 and c.get("/trial/r1/link/secret__h__p0").status_code == 404
    assert [r.name for r in find_runs(root)] == ["r1"]


def test_a_trial_file_linked_out_of_the_root_is_neither_served_nor_shown(root, tmp_path):
    """A shared or copied run folder may hold ``result.json -> /some/host/file``: the trial folder itself lies inside
    the runs folder, so only the file's own name can say where it leads; it is never read."""
    secret = tmp_path / "host-secret.json"
    secret.write_text(json.dumps({"trial_id": "t", "task": "HOST-SECRET", "messages": [{"role": "user", "content":
                                                                                          "HOST-SECRET"}]}))
    trial = root / "r1" / "t__h__p0"
    for name in ("result.json", "trajectory.json"):
        (trial / name).unlink()
        os.symlink(secret, trial / name)
    fifo = root / "r1" / "t__h__p1" / "trajectory.json"
    fifo.unlink()
    os.mkfifo(fifo)  # a reader that opened it would block the viewer for good
    c = client(root)
    for url in ("/raw/r1/t__h__p0/result.json", "/raw/r1/t__h__p0/trajectory.json", "/raw/r1/t__h__p1/trajectory.json"):
        r = c.get(url)
        assert r.status_code == 404 and "HOST-SECRET" not in r.text, url
    for url in ("/run/r1", "/trial/r1/t__h__p0", "/trial/r1/t__h__p1"):
        assert "HOST-SECRET" not in c.get(url).text, url


def test_json_nested_past_the_parser_reads_as_missing(tmp_path):
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "\n" + json.dumps({"ok": 1}) + "\n")
    assert read_jsonl(deep) == [{"ok": 1}]


def test_the_root_may_be_one_run_or_hold_none(root, tmp_path):
    c = client(root / "r1")
    r = c.get("/", follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "/run/"
    assert "2 trial(s) found" in c.get("/run/").text
    assert "No run folder here yet" in client(tmp_path / "empty").get("/").text


def test_unreadable_files_read_as_missing(root):
    (root / "r1" / "t__h__p0" / "trajectory.json").write_text('{"messages": [{"role": "us')
    (root / "r1" / "t__h__p1" / "result.json").write_bytes(b"\xff\xfe")
    c = client(root)
    page = c.get("/trial/r1/t__h__p0")
    assert page.status_code == 200 and "No messages recorded" in page.text
    assert "no result" in c.get("/run/r1").text
    steps = root / "r1" / "steps.jsonl"
    steps.write_text('{"step": 1, "mean_reward": 0.5, "batch": 1}\n[1]\n{"step": 2, "mean_re')
    assert read_jsonl(steps) == [{"step": 1, "mean_reward": 0.5, "batch": 1}]
    assert c.get("/run/r1").text.count("<circle") == 1


def test_filters_that_are_not_numbers_are_named(root):
    text = client(root).get("/run/r1?reward_min=nan&reward_max=x").text
    assert "reward_min: not a finite number: &#39;nan&#39;" in text and "reward_max: not a number: &#39;x&#39;" in text
    assert "2 of 2 shown" in text


# -- the command -------------------------------------------------------------------------------------
def tackroom(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tackroom_app", *args], capture_output=True, text=True, timeout=60,
                          **kwargs)


def test_view_says_what_is_wrong(tmp_path):
    done = tackroom("view", str(tmp_path / "missing"))
    assert done.returncode != 0 and "no such folder" in done.stderr
    done = tackroom("view", str(tmp_path), "--port", "70000")
    assert done.returncode != 0 and "a port is 0…65535" in done.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        done = tackroom("view", str(tmp_path), "--port", str(busy.getsockname()[1]))
    assert done.returncode != 0 and "pick another --port" in done.stderr


def test_view_serves_the_folder_it_is_given(root):
    process = subprocess.Popen([sys.executable, "-m", "tackroom_app", "view", str(root), "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)
        page = httpx.get(url + "run/r1", timeout=30)
        assert page.status_code == 200 and "t__h__p0" in page.text
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)


def test_token_ids_say_why_they_are_not_decoded(root):
    (root / "r1" / "t__h__p0" / "trajectory.json").write_text(Trajectory(
        messages=[{"role": "user", "content": "hi"}], token_ids=[1, 2, 3], loss_mask=[0, 1, 1]).model_dump_json())
    c = client(root)
    page = c.get("/trial/r1/t__h__p0").text
    assert "the run names no tokenizer" in page and page.count('class="tok m1"') == 2
    (root / "r1" / "run.json").write_text(json.dumps({"policy": {"tokenizer": "no-such-tokenizer"}}))
    c = client(root)
    deadline = time.monotonic() + 120
    while "loads: reload in a few seconds" in (page := c.get("/trial/r1/t__h__p0").text):
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert "tokenizer &#39;no-such-tokenizer&#39; could not be loaded here" in page
