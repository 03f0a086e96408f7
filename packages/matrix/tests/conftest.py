"""Fixtures for the matrix tests: a harness that really calls a model, small task sets, a sample report."""

from __future__ import annotations

import random
import shutil
import socket
import struct
import subprocess
import zlib
from pathlib import Path

import httpx
import pytest

import tackroom
import tackroom.testing
import tackroom_app
from tackroom import TrialResult
from tackroom.testing import skip_or_fail
from tackroom_app import TrialErrorInfo
from tackroom_matrix.config import MatrixConfig, ResolvedRow
from tackroom_matrix.runner import MatrixOutcome
from tackroom_matrix.stats import cell_stats

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


class ChatOnceOptions(tackroom.PluginOptions):
    max_tokens: int = 24
    answer_path: str = "/app/answer.txt"


class ChatOnceHarness(tackroom.Harness):
    """Asks the model once (chat completions) and writes its reply to a file; reports behaviour metrics."""

    name = "chat-once"
    Options = ChatOnceOptions
    capabilities = frozenset({"needs_policy"})

    async def run(self, task, sandbox, policy):
        assert policy is not None, "the matrix gives model harnesses a policy"
        body = {"model": policy.model, "messages": [{"role": "user", "content": task.instruction}],
                **policy.sampling, "max_tokens": self.options.max_tokens}
        try:
            async with httpx.AsyncClient(timeout=120) as client:
                response = await client.post(f"{policy.base_url}/chat/completions", json=body,
                                             headers={"Authorization": f"Bearer {policy.api_key}"})
                response.raise_for_status()
        except httpx.HTTPError as exc:
            raise tackroom.InfraError(f"model call failed: {exc}") from exc
        data = response.json()
        reply = data["choices"][0]["message"]["content"] or ""
        await sandbox.write_file(self.options.answer_path, reply)
        return tackroom.Trajectory(
            messages=[{"role": "user", "content": task.instruction}, {"role": "assistant", "content": reply}],
            final_answer=reply,
            metrics={"turns": 1.0, "assistant_tokens": float(data["usage"]["completion_tokens"]),
                     "tool_calls": 0.0},
        )


class ChatOnceViaGatewayHarness(ChatOnceHarness):
    """The same, declared chat-only: the matrix routes it through the policy gateway (exact tokens)."""

    name = "chat-once-gw"
    capabilities = frozenset({"chat", "needs_policy"})


class ChatOncePlugin:
    @tackroom.hookimpl
    def tackroom_harnesses(self, register):
        register.add_harness(ChatOnceHarness)
        register.add_harness(ChatOnceViaGatewayHarness)


@pytest.fixture
def matrix_manager() -> tackroom_app.PluginManager:
    """Installed plugins (built-ins included) plus the chat-once test harness."""
    manager = tackroom_app.PluginManager()
    manager.register(ChatOncePlugin(), name="test:chat-once")
    return manager


def write_task(root: Path, name: str, *, instruction: str, test_sh: str, solve_sh: str | None = "true",
               domain: str = "basics") -> Path:
    return tackroom.testing.write_task(root, name, instruction=instruction, test_sh=test_sh, solve_sh=solve_sh,
                                       toml=f'[metadata]\ndomain = "{domain}"\ncategory = "{domain}-cat"\n'
                                            "[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 30\n")


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- a sample outcome, for the report renderings ---------------------------------------------------
def sample_outcome(tmp_path: Path, *, with_transfer: bool = True) -> MatrixOutcome:
    """Two models × two model-harness rows plus oracle/nop, six tasks in three domains, three passes.

    Rewards come from a seeded generator with a per-(model, harness) skill, so every
    chart has something to show; a few infra, task and model errors are planted.
    """
    rng = random.Random(7)
    models = [{"label": "smollm2", "base_url": "http://127.0.0.1:8011/v1"}]
    if with_transfer:
        models.append({"label": "smollm2-sft", "base_url": "http://127.0.0.1:8012/v1"})
    config = MatrixConfig.model_validate({
        "title": "sample matrix", "tasks": ["x"], "passes": 3, "models": models,
        "harnesses": [{"name": "oracle"}, {"name": "nop"}, {"name": "chat-once", "label": "chat-short"},
                      {"name": "chat-once", "label": "chat-long", "options": {"max_tokens": 256}}],
    })
    rows = [ResolvedRow(index=i, row=h, cls=cls, options=cls.Options(**h.options))
            for i, (h, cls) in enumerate(zip(config.harnesses, [
                tackroom_app.get_plugin_manager().get("harness", "oracle"),
                tackroom_app.get_plugin_manager().get("harness", "nop"), ChatOnceHarness, ChatOnceHarness], strict=True))]
    domains = ["finance", "finance", "shell", "shell", "reporting", "reporting"]
    tasks = []
    for i, d in enumerate(domains):
        path = write_task(tmp_path / "tasks", f"task-{i}", instruction="x", test_sh="true", domain=d)
        tasks.append(tackroom.load_task(path))
    skill = {("smollm2", "chat-short"): 0.25, ("smollm2", "chat-long"): 0.4,
             ("smollm2-sft", "chat-short"): 0.55, ("smollm2-sft", "chat-long"): 0.5,
             (None, "oracle"): 1.0, (None, "nop"): 0.0}
    cells, results = [], []
    for row in rows:
        for model in ([m["label"] for m in models] if row.needs_policy else [None]):
            cell = []
            for p in range(3):
                for t in tasks:
                    r = TrialResult(trial_id=f"{t.id}-{row.label}-{model}-{p}", task=t.id, harness=row.label,
                                    sandbox="local", verifier="test-script", model=model, pass_index=p,
                                    domain=t.domain, category=t.category, timings={"total": 1.0 + rng.random()})
                    s = skill[(model, row.label)]
                    if row.needs_policy and rng.random() < 0.08:
                        r.error = TrialErrorInfo(error_class="infra", type="SandboxError", phase="sandbox_start",
                                                 message="bwrap: setting up uid map: Permission denied")
                    elif row.needs_policy and rng.random() < 0.1:
                        r.error = TrialErrorInfo(error_class="model", type="AgentTimeoutError", phase="harness_run",
                                                 message="agent ran past the task's agent timeout (120s)")
                        r.reward = 0.0
                    else:
                        r.reward = 1.0 if rng.random() < s else 0.0
                    if row.needs_policy:
                        turns = rng.randint(3, 12)
                        calls = turns - 1
                        r.metrics = {"turns": turns, "assistant_tokens": turns * rng.randint(40, 160),
                                     "tool_calls": calls, "tool_call_successes": rng.randint(calls // 2, calls),
                                     "code_executions": rng.randint(0, calls)}
                    cell.append(r)
            results.extend(cell)
            cells.append(cell_stats(cell, model=model, harness=row.label, harness_name=row.row.name, passes=3,
                                    k=3, n_planned=len(cell)))
    return MatrixOutcome(config=config, run_dir=tmp_path / "run", cells=cells, rows=rows, tasks=tasks, endpoints={},
                         notices=["harness row 'archipelago' skipped: 'archipelago' is not installed"],
                         failures=[], results=results)


# -- headless Chromium -----------------------------------------------------------------------------
def decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) from an 8-bit, non-interlaced PNG; enough for screenshots."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert header is not None
    width, height, depth, colour_type, _, _, interlace = header
    assert depth == 8 and interlace == 0 and colour_type in (2, 6), header
    bpp = 3 if colour_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        filt = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if filt == 1:
                line[i] = (line[i] + a) & 0xFF
            elif filt == 2:
                line[i] = (line[i] + b) & 0xFF
            elif filt == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif filt == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line) if bpp == 3 else bytes(v for j, v in enumerate(line) if j % 4 != 3))
        prev = line
    return width, height, rows


def screenshot(chromium: str, page: Path, out: Path, tmp_path: Path, height: int = 2000
               ) -> tuple[int, int, list[bytes]]:
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'chromium-profile'}",
         f"--screenshot={out}", f"--window-size=1280,{height}", page.as_uri()],
        capture_output=True, timeout=120, check=True,
    )
    return decode_png(out.read_bytes())


def painted(rows: list[bytes]) -> tuple[int, float]:
    """(distinct colours, share of pixels that differ from the most common one), on a 2-pixel grid."""
    counts: dict[bytes, int] = {}
    for row in rows[::2]:
        for x in range(0, len(row), 6):
            px = row[x:x + 3]
            counts[px] = counts.get(px, 0) + 1
    total = sum(counts.values())
    return len(counts), 1 - max(counts.values()) / total


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def chromium() -> str:
    """The Chromium binary; skipped with a reason when it is missing, except under CI where that is a failure."""
    if CHROMIUM is None:
        skip_or_fail("chromium is not installed (scripts/setup installs it: apt-get install chromium)")
    return CHROMIUM
