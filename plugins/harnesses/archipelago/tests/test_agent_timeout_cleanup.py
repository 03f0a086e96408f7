"""An agent timeout (the runtime cancels the run mid-request) still closes the harness's engine connections: a
run that leaked them printed "Unclosed client session" at the end of every matrix with a timed-out trial."""

from __future__ import annotations

import asyncio

import pytest
from archipelago_paths import TASKS
from archipelago_scripted_engine import ScriptedEngine
from starlette.responses import JSONResponse

from tackroom import Policy, load_task
from tackroom_app import sandbox_spec
from tackroom_archipelago import ArchipelagoHarness
from tackroom_gateway import engine_client
from tackroom_local import LocalSandboxProvider


class SlowEngine(ScriptedEngine):
    """Answers its model list at once and never finishes a completion (a policy still generating)."""

    async def _complete(self, request) -> JSONResponse:
        self.requests.append(await request.json())
        await asyncio.sleep(60)
        return JSONResponse({})

    async def __aexit__(self, *exc: object) -> None:
        self._server.force_exit = True  # the completion still open is not waited for
        await super().__aexit__(*exc)


async def test_an_agent_timeout_closes_the_engine_client(monkeypatch):
    opened = []
    original = engine_client.EngineClient._open

    def recording(self, *, probe):
        session = original(self, probe=probe)
        opened.append(session)
        return session

    monkeypatch.setattr(engine_client.EngineClient, "_open", recording)
    task = load_task(TASKS / "headcount-by-department")
    harness = ArchipelagoHarness({"max_steps": 2})
    box = LocalSandboxProvider().create(sandbox_spec(task, "archipelago-timeout"))
    await box.start()
    try:
        await harness.setup(box, task)
        async with SlowEngine([]) as engine:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(12):  # as the runtime bounds the agent's turn
                    await harness.run(task, box, Policy(base_url=engine.url, model="scripted"))
    finally:
        await box.stop()
    assert engine.requests, "the run never reached the engine"
    assert opened and all(session.closed for session in opened), opened
