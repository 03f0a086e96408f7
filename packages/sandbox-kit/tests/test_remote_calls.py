"""tackroom_sandbox_kit.remote_calls: a timeout on each SDK call, transient failures retried, the rest not."""

from __future__ import annotations

import asyncio

import pytest

from tackroom import SandboxTimeoutError
from tackroom_sandbox_kit import bounded_call as bounded
from tackroom_sandbox_kit import retried_call as retried


class Flaky(Exception):
    pass


def script(*outcomes):
    """A ``make`` that returns or raises the next outcome each time it is called; counts calls."""
    calls = {"n": 0}

    def make():
        async def once():
            outcome = outcomes[min(calls["n"], len(outcomes) - 1)]
            calls["n"] += 1
            if outcome == "hang":
                await asyncio.sleep(3600)
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome
        return once()

    return make, calls


async def test_bounded_turns_a_hang_into_a_sandbox_timeout_naming_the_call() -> None:
    make, _ = script("hang")
    with pytest.raises(SandboxTimeoutError, match="modal: exec did not answer within 0.05s"):
        await bounded("modal: exec", make, 0.05)
    ok, _ = script(5)
    assert await bounded("x", ok, 1) == 5


async def test_retried_retries_transient_errors_and_hangs_then_succeeds() -> None:
    make, calls = script(Flaky("503"), "hang", 42)
    assert await retried("x", make, timeout=0.05, attempts=3, wait=0.001, transient=(Flaky, SandboxTimeoutError)) == 42
    assert calls["n"] == 3


async def test_retried_does_not_retry_other_errors_and_reraises_the_last() -> None:
    make, calls = script(ValueError("bad request"))
    with pytest.raises(ValueError, match="bad request"):
        await retried("x", make, timeout=1, attempts=5, wait=0.001, transient=(Flaky,))
    assert calls["n"] == 1
    make, calls = script(Flaky("still down"))
    with pytest.raises(Flaky, match="still down"):
        await retried("x", make, timeout=1, attempts=3, wait=0.001, transient=(Flaky,))
    assert calls["n"] == 3


def test_remote_image_key_shares_one_image_per_world(tmp_path):
    from tackroom import SandboxSpec
    from tackroom_sandbox_kit import remote_image_key

    world = tmp_path / "env"
    world.mkdir()
    (world / "Dockerfile").write_text("FROM python:3.12-slim\n")
    kind, key = remote_image_key(SandboxSpec(name="a", environment_dir=world), "base:1")
    assert kind == "dockerfile" and remote_image_key(SandboxSpec(name="b", environment_dir=world), "x")[1] == key
    (world / "data.txt").write_text("changed")
    assert remote_image_key(SandboxSpec(name="a", environment_dir=world), "base:1")[1] != key
    assert remote_image_key(SandboxSpec(name="a", image="reg/img:2"), "base:1") == ("registry", "reg/img:2")
    assert remote_image_key(SandboxSpec(name="a"), "base:1") == ("registry", "base:1")


async def test_stop_remote_reports_a_failure_and_lets_a_cancelled_stop_land():
    import asyncio

    from tackroom_sandbox_kit import stop_remote

    async def boom():
        raise RuntimeError("gone")

    assert str(await stop_remote("delete", boom, 1.0)) == "gone"
    landed = asyncio.Event()

    async def slow_delete():
        await asyncio.sleep(0.2)
        landed.set()

    stopping = asyncio.ensure_future(stop_remote("delete", slow_delete, 2.0))
    await asyncio.sleep(0.05)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert landed.is_set(), "the delete was shielded: it finished before the cancellation went through"
