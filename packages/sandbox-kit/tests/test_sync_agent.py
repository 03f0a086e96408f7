"""run_sync_agent and SyncSandbox: a blocking agent over the trial's sandbox, stopped at its deadline or on
cancellation with nothing left running in the sandbox, its own failure re-raised with its traceback.

The agents here are plain Python loops over the real local sandbox (tackroom-local)."""

from __future__ import annotations

import asyncio
import threading
import time
import traceback

import pytest

from tackroom import SandboxSpec
from tackroom_agent_kit.testing import still_running
from tackroom_local import LocalSandbox, LocalSandboxOptions
from tackroom_sandbox_kit import AgentDeadlineError, AgentStopped, SyncSandbox, run_sync_agent


@pytest.fixture
async def sandbox(tmp_path):
    box = LocalSandbox(SandboxSpec(name="sync-agent"), LocalSandboxOptions(root_dir=str(tmp_path / "roots")))
    await box.start()
    try:
        yield box
    finally:
        await box.stop()


async def processes(sandbox) -> str:
    return (await sandbox.exec("ps -eo args", timeout=30)).stdout


def agent_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "tackroom-sync-agent"]


async def test_a_sync_agent_uses_the_sandbox_and_returns_its_value(sandbox):
    def agent(box: SyncSandbox) -> str:
        box.write_file("/app/note.txt", "from the thread\n")
        result = box.exec("cat note.txt; echo err >&2; exit 3", cwd="/app", env={"X": "1"}, timeout=30)
        assert result.exit_code == 3 and result.stderr.strip() == "err"
        return box.read_file("/app/note.txt").decode() + box.exec("echo $X", env={"X": "1"}, timeout=30).stdout

    assert await run_sync_agent(agent, sandbox) == "from the thread\n1\n"


async def test_an_agent_that_loops_forever_is_stopped_at_the_deadline(sandbox):
    calls = []
    swallowed = []
    facade: list[SyncSandbox] = []

    def agent(box: SyncSandbox) -> None:
        facade.append(box)
        while True:  # an agent that never ends, and turns every failed command into an observation
            try:
                calls.append(box.exec("sleep 0.2", timeout=30).exit_code)
            except Exception as exc:
                swallowed.append(exc)

    started = time.monotonic()
    with pytest.raises(AgentDeadlineError, match="still working at its deadline") as info:
        await run_sync_agent(agent, sandbox, deadline=time.time() + 2)
    assert 2 <= time.monotonic() - started < 2 + 5
    assert info.value.error_class == "model"
    assert calls and not swallowed  # AgentStopped is not an Exception: the agent's handler did not keep it going
    assert not await still_running(sandbox, "sleep 0.2")
    assert not agent_threads(), "the agent thread did not unwind at its next sandbox call"
    with pytest.raises(AgentStopped):  # the facade refuses calls after the stop
        await asyncio.to_thread(facade[0].exec, "true", timeout=5)


async def test_the_deadline_cancels_the_sandbox_command_in_flight(sandbox):
    def agent(box: SyncSandbox) -> None:
        box.exec("sleep 300", timeout=600)

    started = time.monotonic()
    with pytest.raises(AgentDeadlineError):
        await run_sync_agent(agent, sandbox, deadline=time.time() + 1.5)
    assert time.monotonic() - started < 1.5 + 5
    assert not await still_running(sandbox, "sleep 300")
    assert not agent_threads()


async def test_cancelling_the_run_stops_the_agent_and_its_command(sandbox):
    running = threading.Event()
    seen: list[BaseException] = []

    def agent(box: SyncSandbox) -> None:
        running.set()
        try:
            box.exec("sleep 300", timeout=600)
        except BaseException as exc:
            seen.append(exc)
            raise

    run = asyncio.create_task(run_sync_agent(agent, sandbox))
    await asyncio.to_thread(running.wait, 30)
    for _ in range(100):  # the command has started inside the sandbox
        if "sleep 300" in await processes(sandbox):
            break
        await asyncio.sleep(0.1)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert not await still_running(sandbox, "sleep 300")
    assert [type(e) for e in seen] == [AgentStopped]
    assert not agent_threads()


async def test_an_exception_in_the_thread_reaches_the_caller_with_its_traceback(sandbox):
    def parse_reply(text: str) -> int:
        return int(text)

    def agent(box: SyncSandbox) -> int:
        return parse_reply(box.exec("echo not-a-number", timeout=30).stdout)

    with pytest.raises(ValueError, match="not-a-number") as info:
        await run_sync_agent(agent, sandbox)
    frames = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    assert frames[-2:] == ["agent", "parse_reply"], frames


async def test_the_facade_refuses_the_event_loops_own_thread(sandbox):
    box = SyncSandbox(sandbox, asyncio.get_running_loop())
    with pytest.raises(RuntimeError, match="event loop's own thread.*run_sync_agent"):
        box.exec("true")


async def test_a_stopped_facade_refuses_every_call(sandbox):
    box = SyncSandbox(sandbox, asyncio.get_running_loop())
    await box.stop()
    for call in (lambda: box.exec("true"), lambda: box.read_file("/etc/hostname"), box.raise_if_stopped):
        with pytest.raises(AgentStopped):
            await asyncio.to_thread(call)
