"""An agent binary that dies by a signal (a "Bus error" at start-up, as a binary cut short gives, a segfault
mid-run, an OOM kill) is an ``infra`` failure naming the signal, retried within the run's attempts and counted: in
``tackroom run``'s output, in result.json's ``previous_attempts`` and in the matrix's statistics.

The crashing binaries are stand-ins for OpenCode (bash scripts that kill themselves with the signal), bound into
the sandbox by the real harness exactly as OpenCode is; the attempt after them runs the real OpenCode against the
scripted engine through the real gateway, so the retried trial ends as a normal, graded one.
"""

from __future__ import annotations

import json
import re
import runpy
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest
import uvicorn
from opencode_tasks import EXAMPLES

import tackroom_opencode.harness as opencode_harness
from tackroom import TrialResult
from tackroom_agent_kit.testing import ScriptedEngineForTests, tool_call
from tackroom_opencode.install import OpenCodeInstall

pytestmark = pytest.mark.slow  # the last attempt boots the real OpenCode (~10 CPU-s)

CRASH_AT_START_UP = """#!/bin/bash
echo "Bus error (core dumped)" >&2
kill -BUS $$
"""
CRASH_MID_RUN = """#!/bin/bash
if [ "$1" = "--version" ]; then echo "{version}"; exit 0; fi
echo "working" >&2
sleep 2.5
kill -SEGV $$
"""


def fake_install(tmp_path: Path, name: str, script: str, real: OpenCodeInstall) -> OpenCodeInstall:
    """What the sandbox gets, with ``script`` as its ``opencode``."""
    shipped = tmp_path / "fake" / name
    shipped.mkdir(parents=True)
    (shipped / "opencode").write_text(script.format(version=real.version))
    shutil.copyfile(real.shipped / "rg", shipped / "rg")
    for binary in shipped.iterdir():
        binary.chmod(0o555)
    return real.model_copy(update={"binary": shipped / "opencode", "shipped": shipped})


class EngineThread:
    """The scripted engine served by uvicorn in its own thread, so the synchronous CLI can run against it."""

    def __init__(self, app) -> None:
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the scripted engine did not start"
            time.sleep(0.05)
        return f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}/v1"

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def test_a_binary_killed_by_a_signal_is_infra_retried_and_counted(tmp_path, monkeypatch, capsys, smollm2_tokenizer,
                                                                   opencode_install):
    installs = iter([fake_install(tmp_path, "bus", CRASH_AT_START_UP, opencode_install),
                     fake_install(tmp_path, "segv", CRASH_MID_RUN, opencode_install),
                     opencode_install])

    async def next_install(*args, **kwargs) -> OpenCodeInstall:
        return next(installs)

    monkeypatch.setattr(opencode_harness, "ensure_installed", next_install)
    solve = tool_call("bash", command="printf 'Hello, tackroom!\\n' > /app/greeting.txt", description="greet")
    engine = ScriptedEngineForTests(smollm2_tokenizer, replies=[solve, "Created /app/greeting.txt."])
    config = tmp_path / "run.toml"
    with EngineThread(engine.app()) as url:
        config.write_text(
            f'tasks = ["{EXAMPLES / "hello-file"}"]\n[harness]\nname = "opencode"\n[sandbox]\nname = "local"\n'
            f'[policy]\nbase_url = "{url}"\ntokenizer = "smollm2"\n[policy.sampling]\ntemperature = 0.0\n'
            f'max_tokens = 256\n[runtime]\nout = "{tmp_path / "runs"}"\nattempts = 3\nretry_backoff_sec = 0.01\n')
        # `python -m tackroom_app run`, in this process (the fake installs are patched in here)
        monkeypatch.setenv("COLUMNS", "250")
        monkeypatch.setattr(sys, "argv", ["tackroom", "run", "--config", str(config), "--run-id", "r"])
        with pytest.raises(SystemExit) as exited:
            runpy.run_module("tackroom_app", run_name="__main__")
    output = capsys.readouterr().out
    assert exited.value.code in (0, None), output
    # `tackroom run` counts the retried attempts (the per-row "(attempt N: ...)" may be cut by the table's width
    # under capture; result.json's previous_attempts, below, name each one)
    assert "retried attempts 2" in output

    (result_file,) = (tmp_path / "runs" / "r").glob("*/result.json")
    result = TrialResult.model_validate_json(result_file.read_text())
    assert result.error is None and result.reward == 1.0 and result.attempt == 3
    first, second = result.previous_attempts
    assert first.error.error_class == "infra" and first.error.phase == "harness_setup"
    # 135 from a shell that waited for it, -7 from one that exec'd it: the local sandbox's bash execs a last command
    assert re.search(r"was killed by SIGBUS \(signal 7, bus error; exit status (135|-7)\) at start-up", first.error.message)
    assert "Bus error (core dumped)" in first.error.message
    assert second.error.error_class == "infra" and second.error.phase == "harness_run"
    assert "was killed by SIGSEGV (signal 11, segmentation fault; exit status 139)" in second.error.message
    assert "working" in second.error.message  # its stderr comes with it

    # The matrix counts them (matrix.json's cells, matrix.csv's `retries` column, the report's errors table).
    from tackroom_matrix.report import CSV_FIELDS
    from tackroom_matrix.stats import cell_stats

    cell = cell_stats([result], model="scripted", harness="opencode", harness_name="opencode", passes=1, k=1,
                      n_planned=1)
    assert (cell.retries, cell.retried_trials, cell.retry_causes) == (2, 1, {"OpenCodeCrashError": 2})
    assert cell.errors == {"infra": 0, "model": 0, "task": 0} and cell.pass_at_1 == 1.0
    assert "retries" in CSV_FIELDS and json.loads(cell.model_dump_json())["retries"] == 2
