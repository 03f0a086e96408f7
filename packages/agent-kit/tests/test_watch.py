"""The watch over an agent's run: each way it ends, progress that is not a hang, and the stop that always follows.

The agent harnesses' own tests drive the real thing (a real agent in a real sandbox); here the control script and
the relay are doubles, so each ending can be ordered exactly and quickly."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import pytest

from tackroom_agent_kit import AgentControlError, AgentOptions, AgentState, run_watched, stopped_after, watch_run


class OptionsForTests(AgentOptions):
    version: str = "1.0.0"
    sandbox_dir: str = "/opt/agent"


@dataclass
class RelayDoubleForTests:
    """What the watch reads of a :class:`~tackroom_agent_kit.ModelRelay`."""

    limit_reached: bool = False
    failures: int = 0
    in_flight: int = 0
    last_activity: float = field(default_factory=time.monotonic)


class ControlDoubleForTests:
    """An :class:`~tackroom_agent_kit.AgentControl` whose polls answer from a script (the last state repeats)."""

    def __init__(self, *states: AgentState, on_poll=None) -> None:
        self.states = list(states)
        self.polls = 0
        self.on_poll = on_poll
        self.stops: list[int] = []

    async def poll(self, sandbox) -> AgentState:
        self.polls += 1
        if self.on_poll:
            self.on_poll(self.polls)
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]

    async def stop(self, sandbox, grace: int) -> None:
        await asyncio.sleep(0.05)  # a stop takes a while: a cancelled run must still see it through
        self.stops.append(grace)


RUNNING = AgentState(alive=True, exit_code=None, sizes=(0, 0, 0))
OPTIONS = OptionsForTests(hang_timeout_sec=0.5, poll_interval_sec=0.05, max_model_errors=2, kill_grace_sec=3)


async def ended(control, relay, *, deadline_s: float = 30.0, options: AgentOptions = OPTIONS) -> str:
    return await asyncio.wait_for(watch_run(None, control, relay, options, time.monotonic() + deadline_s), 10)


async def test_an_exit_status_ends_the_run_even_while_the_process_lingers():
    assert await ended(ControlDoubleForTests(RUNNING, AgentState(True, "0", (1, 0, 0))), RelayDoubleForTests()) \
        == "exited"


async def test_a_process_gone_without_an_exit_status_died():
    assert await ended(ControlDoubleForTests(RUNNING, AgentState(False, None, (0, 0, 0))), RelayDoubleForTests()) \
        == "died"


async def test_the_turn_limit_and_a_failing_endpoint_end_the_run():
    assert await ended(ControlDoubleForTests(RUNNING), RelayDoubleForTests(limit_reached=True)) == "max_turns"
    assert await ended(ControlDoubleForTests(RUNNING), RelayDoubleForTests(failures=1)) == "hang"
    assert await ended(ControlDoubleForTests(RUNNING), RelayDoubleForTests(failures=2)) == "model_errors"


async def test_no_output_and_no_call_in_flight_is_a_hang():
    t0 = time.monotonic()
    assert await ended(ControlDoubleForTests(RUNNING), RelayDoubleForTests()) == "hang"
    assert 0.5 <= time.monotonic() - t0 < 2


async def test_output_or_a_call_in_flight_is_progress_not_a_hang():
    # Growing output for a while, then silence: the hang is counted from the last growth.
    control = ControlDoubleForTests(*[AgentState(True, None, (n, 0, 0)) for n in range(20)])
    t0 = time.monotonic()
    assert await ended(control, RelayDoubleForTests()) == "hang"
    assert time.monotonic() - t0 >= 0.5 + 0.5  # 20 polls at ≥ 0.05 s apart, then the hang timeout
    # A model call in flight (a slow model) with no output at all is not a hang: only the deadline ends it.
    t0 = time.monotonic()
    assert await ended(ControlDoubleForTests(RUNNING), RelayDoubleForTests(in_flight=1), deadline_s=1.5) == "timeout"
    assert 1.5 <= time.monotonic() - t0 < 3


async def test_the_deadline_ends_a_run_that_keeps_working():
    control = ControlDoubleForTests(RUNNING, on_poll=lambda n: control.states.__setitem__(0, AgentState(
        True, None, (n, 0, 0))))
    assert await ended(control, RelayDoubleForTests(), deadline_s=1.0) == "timeout"


async def test_a_control_script_that_cannot_look_raises():
    class Broken(ControlDoubleForTests):
        async def poll(self, sandbox) -> AgentState:
            raise AgentControlError("could not check on the agent (exit 1): boom")

    with pytest.raises(AgentControlError, match="boom"):
        await ended(Broken(RUNNING), RelayDoubleForTests())


async def test_run_watched_starts_watches_and_stops_with_the_grace():
    control = ControlDoubleForTests(AgentState(False, "0", (0, 0, 0)))
    started = []

    async def start() -> None:
        started.append(True)

    ending = await run_watched(None, control, RelayDoubleForTests(), OPTIONS, time.monotonic() + 10, start)
    assert ending == "exited" and started == [True] and control.stops == [3]


async def test_a_failed_start_still_stops_everything_and_raises():
    control = ControlDoubleForTests(RUNNING)

    async def start() -> None:
        raise AgentControlError("could not start the agent in the sandbox (exit 1): no bash")

    with pytest.raises(AgentControlError, match="no bash"):
        await run_watched(None, control, RelayDoubleForTests(), OPTIONS, time.monotonic() + 10, start)
    assert control.stops == [3] and control.polls == 0


async def test_a_cancelled_run_stops_everything_at_once_even_when_cancelled_again():
    # The runtime's agent timeout cancels the run: no time for a grace period, and the stop must finish.
    control = ControlDoubleForTests(RUNNING)
    run = asyncio.create_task(stopped_after(None, control, 3, lambda: asyncio.sleep(60)))
    await asyncio.sleep(0.05)
    run.cancel()
    await asyncio.sleep(0.01)
    run.cancel()  # cancelled again while stopping
    with pytest.raises(asyncio.CancelledError):
        await run
    assert control.stops == [0]


def test_the_options_every_agent_has():
    options = OptionsForTests(cache_dir="~/agents", compact_below_context=8192, timeout_margin_sec=30)
    assert options.cache_path() is not None and "~" not in str(options.cache_path())
    assert OptionsForTests().cache_path() is None
    assert options.profile_for(4096) == "compact" and options.profile_for(8192) == "full"
    assert OptionsForTests(profile="full").profile_for(10) == "full"
    # the margin is at most a fifth of the agent timeout
    assert options.deadline(100) - time.monotonic() == pytest.approx(80, abs=1)
    assert options.deadline(1000) - time.monotonic() == pytest.approx(970, abs=1)
    with pytest.raises(ValueError, match="sandbox_dir"):
        AgentOptions(version="1")  # a harness names where its agent lives
