"""tackroom_sandbox_kit.RemoteSandbox: the slot held from start to stop, a create a cancellation does not lose,
a bounded stop whose failure is a note, no start after stop. The remote service is a double (no cloud here),
named so; the lifecycle under test is the kit's own."""

from __future__ import annotations

import asyncio

import pytest

from tackroom import SandboxError, SandboxSpec
from tackroom_sandbox_kit import RemoteSandbox


class RemoteServiceForTests:
    """What a cloud SDK would do: create after ``create_delay`` seconds (or fail), delete (or fail)."""

    def __init__(self, *, create_delay: float = 0.0, create_error: Exception | None = None,
                 delete_error: Exception | None = None) -> None:
        self.create_delay, self.create_error, self.delete_error = create_delay, create_error, delete_error
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.create_started = asyncio.Event()

    async def create(self, name: str) -> str:
        self.create_started.set()
        await asyncio.sleep(self.create_delay)
        if self.create_error is not None:
            raise self.create_error
        self.created.append(name)
        return name

    async def delete(self, handle: str) -> None:
        if self.delete_error is not None:
            raise self.delete_error
        self.deleted.append(handle)


class ServiceSandboxForTests(RemoteSandbox):
    service = "test-service"
    stop_call = "Sandbox.delete"

    def __init__(self, spec: SandboxSpec, remote: RemoteServiceForTests, slots: asyncio.Semaphore) -> None:
        super().__init__(spec, slots=slots, cleanup_marker="tagged test.managed", create_timeout=5, stop_timeout=5)
        self.remote = remote

    async def _prepare_create(self):
        return lambda: self.remote.create(self.spec.name)

    def _destroy(self, handle):
        return self.remote.delete(handle)

    async def exec(self, cmd, **kw):  # not what these tests are about
        raise NotImplementedError

    async def _put(self, data, remote, timeout):
        raise NotImplementedError

    async def _get(self, remote, timeout):
        raise NotImplementedError


def sandbox(remote: RemoteServiceForTests, slots: asyncio.Semaphore, **spec) -> ServiceSandboxForTests:
    return ServiceSandboxForTests(SandboxSpec(name="t1", **spec), remote, slots)


async def test_the_slot_is_held_from_start_to_stop_and_stop_is_idempotent():
    remote, slots = RemoteServiceForTests(), asyncio.Semaphore(1)
    sb = sandbox(remote, slots)
    await sb.start()
    assert slots.locked() and sb.sandbox == "t1"
    await sb.stop()
    await sb.stop()
    assert not slots.locked() and remote.deleted == ["t1"] and sb.sandbox is None
    with pytest.raises(SandboxError, match="sandbox t1 was stopped; create a new one"):
        await sb.start()
    with pytest.raises(SandboxError, match="test-service sandbox t1 is not running"):
        sb._live()


async def test_a_failed_create_gives_the_slot_back():
    remote, slots = RemoteServiceForTests(create_error=RuntimeError("quota")), asyncio.Semaphore(1)
    with pytest.raises(RuntimeError, match="quota"):
        await sandbox(remote, slots).start()
    assert not slots.locked() and remote.deleted == []


async def test_a_cancelled_start_waits_for_the_create_and_deletes_what_it_made():
    remote, slots = RemoteServiceForTests(create_delay=0.3), asyncio.Semaphore(1)
    sb = sandbox(remote, slots)
    task = asyncio.create_task(sb.start())
    await remote.create_started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert remote.created == ["t1"] and remote.deleted == ["t1"] and not slots.locked()


async def test_a_failed_delete_is_a_note_that_says_how_to_clean_up():
    remote, slots = RemoteServiceForTests(delete_error=RuntimeError("503")), asyncio.Semaphore(1)
    sb = sandbox(remote, slots, storage_mb=100)
    await sb.start()
    await sb.stop()
    assert not slots.locked()
    assert sb.notes == ["storage_mb = 100 is not enforced: the test-service sandbox cannot limit its disk",
                        "delete failed (503); `cleanup` removes sandboxes tagged test.managed"]
