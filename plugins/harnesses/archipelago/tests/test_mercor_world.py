"""Mercor's real MCP servers (filesystem, chat) as tackroom worlds, in a docker sandbox on Python 3.13.

Needs the Mercor checkout (``../shared/mercor-archipelago`` beside the repo, or
``$TACKROOM_MERCOR_ARCHIPELAGO``), a Docker engine and a ``python:3.13-slim-bookworm`` image (here
``../shared/tools/tb2-python-base.sh`` builds one offline); each is a skip locally and a failure under CI.
Slow: the first run installs each server's packages (FastMCP, litellm, ...) on the host into the world's build;
a run binds the build read-only (the first test, as the runtime does) or uploads it (the others), and waits for
the servers to list their tools.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import random
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from archipelago_scripted_engine import ScriptedChatEngine, ScriptedEngine, call
from PIL import Image as PILImage
from test_mercor_import import SAMPLE, mercor_checkout

import tackroom_app
from tackroom import Policy, load_task
from tackroom.testing import skip_or_fail
from tackroom_app import sandbox_spec
from tackroom_archipelago import ArchipelagoHarness
from tackroom_archipelago.mercor_import import import_tasks
from tackroom_rubric_judge import RubricJudgeVerifier
from tackroom_rubric_judge.rubric import task_rubric
from tackroom_rubric_judge.testing import MisbehavingJudgeServerForTests

pytestmark = [pytest.mark.slow, pytest.mark.docker]

REPO = Path(__file__).resolve().parents[4]
EXAMPLE_TASK = REPO / "examples" / "worlds" / "mercor" / "tasks" / "find-q3-revenue"
IMAGE = "python:3.13-slim-bookworm"


def docker_with_python313() -> None:
    try:
        found = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        skip_or_fail(f"no usable docker CLI/engine ({exc})")
    if found.returncode != 0:
        skip_or_fail(f"no {IMAGE} image (Mercor's servers need Python 3.13): `docker pull {IMAGE}`, or offline "
                     "../shared/tools/tb2-python-base.sh")


def docker_sandbox(task, mounts=None, **options):
    from tackroom_docker import DockerProvider

    spec = sandbox_spec(task, "mercor-world").model_copy(update={"mounts": mounts or {}})
    # removing a container that holds the servers' sites (about 600 MB each) takes a while on a busy host
    return DockerProvider({"cli_timeout_sec": 300, **options}).create(spec)


async def test_the_example_world_runs_mercors_filesystem_and_chat_servers(monkeypatch):
    checkout = mercor_checkout()
    docker_with_python313()
    monkeypatch.setenv("TACKROOM_MERCOR_ARCHIPELAGO", str(checkout))
    task = load_task(EXAMPLE_TASK)
    harness = ArchipelagoHarness({"max_steps": 4, "tools_include": ["filesystem_read_text_file", "chat_*"]})
    box = docker_sandbox(task, await harness.mounts(task))  # as the runtime asks: the build bound, not uploaded
    await box.start()
    try:
        await harness.setup(box, task)
        assert harness.layout.mounted
        listing = harness.gateway.listing
        assert (listing["filesystem"].tools, listing["chat"].tools) == (6, 9), listing
        assert all(s.seconds > 0 for s in listing.values())
        print("listing:", harness.gateway.describe(), "| startup", harness.gateway.startup_s, "s")
        assert harness.world.interpreters["filesystem"].version == "3.13"
        script = [
            call("filesystem_read_text_file", file_path="/reports/q3-summary.md"),
            call("chat_post_message", channel_id="Space AAQAops", message="West Q3 revenue: 372,435 USD"),
            "I posted the West figure (372,435 USD) in ops.",
        ]
        async with ScriptedEngine(script, max_model_len=16384) as engine:
            traj = await harness.run(task, box, Policy(base_url=engine.url, model="scripted"))
        read, posted = [m["content"] for m in traj.messages if m["role"] == "tool"]
        assert "West 372,435" in read, read
        assert traj.metrics["tool_call_success_rate"] == 1.0, posted
        reward = await tackroom_app.instantiate("verifier", "test-script").verify(task, box, traj)
        assert reward.score == 1.0, reward.details
    finally:
        await box.stop()


GORILLA_SHA256 = "0c65c83a6b101d3ef9a7a2c260a8c5a7f0909a037aa6dacfd3056237ca2f157f"
"""The gorilla picture's bytes in the sample's snapshot: the policy knows the pixels, never the file name."""


class PixelMatchingPolicy:
    """A scripted vision policy for the sample: it lists the pictures, reads each with ``read_image_file``, decodes
    what it was sent (base64, then Pillow) and answers with the file whose pixels are the gorilla's. Without
    pixels (a text-only model) it cannot tell and says so."""

    def __init__(self) -> None:
        self.seen: dict[str, bytes] = {}  # sandbox path -> the image bytes that reached the policy
        self.decoded: dict[str, tuple[str, tuple[int, int]]] = {}  # path -> (format, size) as Pillow reads them

    def script(self) -> list:
        return [call("filesystem_search_files", pattern="*", path="/animals"), self.read_each, self.answer]

    def read_each(self, body: dict) -> str:
        listing = body["messages"][-1]["content"]
        pictures = [line.strip() for line in listing.splitlines() if line.strip().startswith("/animals/")]
        assert len(pictures) == 4, listing
        return "\n".join(call("filesystem_read_image_file", file_path=p) for p in pictures)

    def answer(self, body: dict) -> str:
        messages = body["messages"]
        asked = next(m for m in reversed(messages) if m["role"] == "assistant")
        paths = {c["id"]: json.loads(c["function"]["arguments"])["file_path"] for c in asked["tool_calls"]}
        # the tool message names the image's slot ("[image 2: ...]"); the user message after the tool messages
        # carries slot k as the part after the text "Image k (from ...)"
        slot_of = {}
        for m in messages:
            if m["role"] == "tool" and m.get("tool_call_id") in paths:
                found = re.match(r"\[image (\d+): ", m["content"])
                if found:
                    slot_of[int(found.group(1))] = paths[m["tool_call_id"]]
        parts = messages[-1]["content"] if messages[-1]["role"] == "user" else []
        for label, part in zip(parts[::2], parts[1::2], strict=True):
            slot = int(re.fullmatch(r"Image (\d+) \(from filesystem_read_image_file\):", label["text"]).group(1))
            assert part["type"] == "image_url"
            head, data = part["image_url"]["url"].split(",", 1)
            raw = base64.b64decode(data, validate=True)
            with PILImage.open(io.BytesIO(raw)) as picture:
                picture.load()  # every pixel decodes
                self.decoded[slot_of[slot]] = (picture.format, picture.size)
            assert head == f"data:{PILImage.MIME[self.decoded[slot_of[slot]][0]]};base64"
            self.seen[slot_of[slot]] = raw
        gorilla = [path for path, raw in self.seen.items() if hashlib.sha256(raw).hexdigest() == GORILLA_SHA256]
        if len(gorilla) != 1:
            return "I could not see the pictures, so I cannot tell which one is the gorilla."
        return f"The gorilla is at {gorilla[0]}"


def large_and_hostile_pictures(files: Path) -> bytes:
    """Beside the sample's pictures: a real photo-sized PNG (noise, about 1.5 MB: over docker's default 1 MB exec
    output cap once base64'd twice through the exec relay, under the cap run.toml sets), and what a hostile
    snapshot can hold: a text file named .png and a "PNG" over the default image_max_bytes (5,000,000). The
    photo's bytes."""
    (files / "photos").mkdir()
    buffer = io.BytesIO()
    PILImage.frombytes("RGB", (800, 640), random.Random(7).randbytes(800 * 640 * 3)).save(buffer, "PNG")
    (files / "photos" / "noise.png").write_bytes(buffer.getvalue())
    (files / "hostile").mkdir()
    (files / "hostile" / "not-an-image.png").write_bytes(b"this is text, not a picture\n")
    (files / "hostile" / "huge.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(6_000_000))
    return buffer.getvalue()


async def test_the_imported_public_sample_is_solved_through_images_on_mercors_server(tmp_path):
    """Mercor's simple_task, imported, run against Mercor's real filesystem server: a scripted vision policy
    (the chat endpoint) reads the four pictures, gets their pixels as image_url parts and names the gorilla by
    its pixels; the rubric judge (a scripted judge server: no judge model runs here) grades the answer on the
    snapshot diff: 1.0. The control, ``images = "placeholder"`` (a text-only model), gets no pixels, cannot
    tell, and scores 0. Then hostile picture files become notes, and the episode goes on; and on /v1/completions
    (token ids carry no pixels) the placeholder is what the recorded ids hold."""
    mercor_checkout()
    docker_with_python313()
    [imported] = import_tasks(SAMPLE, tmp_path / "tasks")
    files = imported.path / "world" / "files"
    by_hash = {hashlib.sha256(p.read_bytes()).hexdigest(): "/" + p.relative_to(files).as_posix()
               for p in files.rglob("*") if p.is_file()}
    gorilla = by_hash[GORILLA_SHA256]  # the sample's labelled picture, found by its bytes
    photo = large_and_hostile_pictures(files)
    task = load_task(imported.path)
    run = tomllib.loads((tmp_path / "tasks" / "run.toml").read_text())
    sandbox_options = {k: v for k, v in run["sandbox"].items() if k != "name"}  # what `tackroom run -c` would use
    [criterion] = task_rubric(task)
    assert gorilla in criterion.criterion  # the rubric names the same file
    prompts: list[str] = []

    def decide(prompt: str) -> bool:  # passes when the agent's answer names the gorilla's path
        prompts.append(prompt)
        answer = prompt.split("# The agent's final answer", 1)[1].split("# ", 1)[0]
        return gorilla in answer

    box = docker_sandbox(task, **sandbox_options)
    with MisbehavingJudgeServerForTests(decide=decide) as server:
        judge = RubricJudgeVerifier({"base_url": server.base_url, "model": "judge"})
        await box.start()
        try:
            await judge.prepare(task, box)
            harness = ArchipelagoHarness({"max_steps": 4, "images": "send"})
            assert harness.options.image_max_bytes == 5_000_000
            await harness.setup(box, task)
            assert harness.gateway.listing["filesystem"].tools == 6
            print("listing:", harness.gateway.describe(), "| startup", harness.gateway.startup_s, "s")

            policy = PixelMatchingPolicy()
            async with ScriptedChatEngine(policy.script(), max_model_len=32768) as engine:
                traj = await harness.run(task, box, Policy(base_url=engine.url, model="scripted-vision"))
            solved = await judge.verify(task, box, traj)

            # the control: the same world and policy, the model declared text-only
            harness.options = harness.options.model_copy(update={"images": "placeholder"})
            blind = PixelMatchingPolicy()
            async with ScriptedChatEngine(blind.script(), max_model_len=32768) as engine:
                control = await harness.run(task, box, Policy(base_url=engine.url, model="scripted-text"))
                control_requests = engine.requests
            unsolved = await judge.verify(task, box, control)

            harness.options = harness.options.model_copy(update={"images": "send"})
            script = ["\n".join(call("filesystem_read_image_file", file_path=p) for p in (
                "/hostile/not-an-image.png", "/hostile/huge.png", "/../../etc/passwd.png", "/photos/noise.png")),
                "Noise, and nothing else to see."]
            async with ScriptedChatEngine(script, max_model_len=32768) as engine:
                hostile = await harness.run(task, box, Policy(base_url=engine.url, model="scripted-vision"))
                hostile_requests = engine.requests

            # a text-only token path (/v1/completions, images = "auto"): the placeholder, in the exact ids
            harness.options = harness.options.model_copy(update={"images": "auto"})
            script = [call("filesystem_read_image_file", file_path=gorilla), "I cannot see it."]
            async with ScriptedEngine(script, max_model_len=16384) as engine:
                tokens = await harness.run(task, box, Policy(base_url=engine.url, model="scripted"))
                token_prompt = engine.template.decode(engine.requests[-1]["prompt"])
        finally:
            await box.stop()

    # The pixels reached the policy: each picture byte for byte as the snapshot holds it, a JPEG Pillow decodes
    # (the files are named .png; the harness sniffed the bytes and labelled them image/jpeg).
    assert traj.messages[0]["content"].startswith("You are an AI assistant that completes tasks")
    assert sorted(policy.seen) == sorted(p for p in by_hash.values())
    for path, raw in policy.seen.items():
        assert raw == (files / path.lstrip("/")).read_bytes(), path
        assert policy.decoded[path][0] == "JPEG"
    assert policy.decoded[gorilla][1] == (220, 246)
    assert traj.final_answer == f"The gorilla is at {gorilla}" and traj.metrics["images"] == 4.0
    assert solved.score == 1.0, json.dumps(solved.details)[:2000]
    # the judge saw the diff against the imported snapshot: the agent changed nothing
    assert "# Files the agent changed\nFiles under /filesystem: 0 added, 0 removed, 0 modified, 7 unchanged." \
        in prompts[0], prompts[0]

    # The control: no pixels anywhere in what the text-only model was sent; the placeholder says what was there.
    assert not blind.seen and "image_url" not in json.dumps(control_requests)
    placeholders = [m["content"] for m in control.messages if m["role"] == "tool"][1:]
    assert len(placeholders) == 4 and all(re.fullmatch(
        r"\[image image/jpeg, [\d,]+ bytes: not shown, this model reads text only\]", p) for p in placeholders), placeholders
    assert control.final_answer.startswith("I could not see the pictures")
    assert unsolved.score == 0.0, json.dumps(unsolved.details)[:2000]

    # Hostile files through the real server: notes for the model, the episode goes on; the large photo arrives.
    fake, huge, escape, large = (m["content"] for m in hostile.messages if m["role"] == "tool")
    assert fake == "[image dropped: 28 bytes claimed as image/png are not a PNG, JPEG, GIF or WebP image]"
    assert huge.startswith("[image dropped: about 6,000,008 bytes (image/png), over the 5,000,000-byte limit"), huge
    # the server refuses the climb (its own check); the model reads the error, never a file outside the snapshot
    assert "Access denied: /../../etc/passwd.png" in escape and hostile.metrics["tool_errors/tool_error"] == 1.0, escape
    assert large == f"[image 1: image/png, {len(photo):,} bytes; shown in the next message]" and len(photo) > 1_000_000
    parts = hostile_requests[-1]["messages"][-1]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url"]  # only the photo became an image part
    assert base64.b64decode(parts[1]["image_url"]["url"].split(",", 1)[1]) == photo
    assert hostile.stop_reason == "completed" and hostile.metrics["images"] == 1.0

    [read] = [m["content"] for m in tokens.messages if m["role"] == "tool"]
    assert read == "[image image/jpeg, 20,860 bytes: not shown, this model reads text only]" and read in token_prompt
    assert tokens.token_ids == tokens.turns[-1].prompt_ids + tokens.turns[-1].completion_ids
