"""What the service's tests share: test plugins, a service served in the test's event loop on a free port (uvicorn,
a real socket, the real client), row counts and waiting."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import uvicorn

import tackroom
from tackroom.testing import write_task
from tackroom_serve import AsyncServeClient, ServeSettings, Service, Tokens

REPO = Path(__file__).resolve().parents[3]
EXAMPLE_TASKS = REPO / "examples" / "tasks"
TOKEN = "test-token-" + "x" * 24
OTHER_TOKEN = "other-token-" + "y" * 24


# -- test plugins ------------------------------------------------------------------------------------
class SleepyOptions(tackroom.PluginOptions):
    seconds: float = 0.5


class SleepyHarness(tackroom.Harness):
    """Waits ``seconds``, then hands back a token-level trajectory: one turn the engine sampled at version 5."""

    name = "sleepy"
    Options = SleepyOptions

    async def run(self, task, sandbox, policy):
        await asyncio.sleep(self.options.seconds)
        turn = tackroom.TokenTurn(prompt_ids=[1, 2, 3], completion_ids=[4, 5], logprobs=[-0.5, -0.25],
                                  policy_version=5)
        return tackroom.Trajectory(messages=[{"role": "user", "content": task.instruction}], turns=[turn],
                                   token_ids=[1, 2, 3, 4, 5], loss_mask=[0, 0, 0, 1, 1],
                                   logprobs=[0.0, 0.0, 0.0, -0.5, -0.25], notes=["slept"])


class FlakyOptions(tackroom.PluginOptions):
    fail_while: str
    """The grader fails (``infra``) while this file exists."""


class FlakyVerifier(tackroom.Verifier):
    """A grader whose backend is down while a file exists: its failure is ``infra``, never the model's."""

    name = "flaky-grader"
    Options = FlakyOptions

    async def verify(self, task, sandbox, trajectory):
        if Path(self.options.fail_while).exists():
            raise tackroom.InfraError("the grading service answered 503")
        return tackroom.Reward(score=1.0)


class ServeTestPlugins:
    @tackroom.hookimpl
    def tackroom_harnesses(self, register):
        register.add_harness(SleepyHarness)

    @tackroom.hookimpl
    def tackroom_verifiers(self, register):
        register.add_verifier(FlakyVerifier)


# -- a service in this event loop ---------------------------------------------------------------------
class _QuietServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # the test process keeps its own signal handlers
        yield


@contextlib.asynccontextmanager
async def served(folder: Path, manager: Any, *, db: str | None = None, **settings: Any
                 ) -> AsyncIterator[tuple[Service, AsyncServeClient]]:
    """A :class:`Service` on a free loopback port, and a client holding the test token."""
    service = Service(ServeSettings(folder=folder, db=db, **settings),
                      Tokens({TOKEN: "trainer", OTHER_TOKEN: "evaluator"}), manager=manager)
    server = _QuietServer(uvicorn.Config(service.app, host="127.0.0.1", port=0, log_level="warning",
                                         lifespan="on", timeout_graceful_shutdown=2))
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 30
    while not server.started:
        assert not task.done(), f"the service did not start: {task.exception()}"
        assert time.monotonic() < deadline, "the service did not start within 30 s"
        await asyncio.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    client = AsyncServeClient(f"http://127.0.0.1:{port}", TOKEN, timeout=30)
    try:
        yield service, client
    finally:
        await client.close()
        server.should_exit = True
        await asyncio.wait_for(task, 30)


def row_counts(engine: sa.Engine) -> dict[str, int]:
    """Rows per table: a refused request must leave these as they were."""
    with engine.connect() as conn:
        return {t: conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one()
                for t in ("batches", "rollouts", "results")}


async def wait_for(predicate: Any, timeout: float = 30.0, what: str = "the condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


def run_config(tasks: Any, **config: Any) -> dict[str, Any]:
    return {"tasks": [str(t) for t in (tasks if isinstance(tasks, list) else [tasks])], **config}


def word_tasks(root: Path) -> Path:
    """Three tasks the oracle solves (reward 1) and nop does not (reward 0): alpha, beta, gamma, each asking for a
    word in /app/out.txt."""
    for name, word in (("alpha", "one"), ("beta", "two"), ("gamma", "three")):
        write_task(root, name, instruction=f"Write {word} to /app/out.txt", solve_sh=f"echo {word} > /app/out.txt\n",
                   test_sh=f'[ "$(cat /app/out.txt 2>/dev/null)" = "{word}" ] && echo 1 > /logs/verifier/reward.txt'
                           ' || echo 0 > /logs/verifier/reward.txt\n')
    return root
