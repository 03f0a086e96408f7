"""The harness conformance suite: one call proves a harness behaves in the trial runtime like every other.

A harness's tests call

```python
from tackroom.testing import HarnessScript, KIT_SOLUTION, harness_self_check

async def test_my_harness_conforms():
    script = HarnessScript(solve=[my_reply_typing(KIT_SOLUTION)], idle=my_reply_doing_nothing())
    await harness_self_check(MyHarness, sandbox=LocalProvider(), script=script)
```

or :func:`run_harness_checks` for the :class:`HarnessCheckReport` without
raising. Each check runs the kit's tiny task (write ``kit-ok`` to
``/app/kit.txt``) through the real trial runtime (sandbox start, harness setup,
harness run under the agent timeout, the ``test-script`` verifier, teardown) on
the sandbox provider given. Harnesses that call a model (capability
``needs_policy``) talk to a :class:`ScriptedChatServerForTests` that replays
what the :class:`HarnessScript` says (or to what ``model_server`` starts, e.g.
a scripted engine behind the real policy gateway for a harness whose client
streams and needs tool calls parsed); the model checks are reported skipped (never passed) for the rest.

Checks (names in :data:`ALL_CHECKS`):

- ``plugin``: :func:`check_plugin` (name, strict Options, docstring).
- ``solves_task``: the scripted episode (or the harness alone) scores
  ``expected_reward`` with no error and returns a valid trajectory that records
  the replies it was given.
- ``max_turns``: with the harness's turn limit set to 2 and a model that never
  finishes, at most 2 model calls are made and the trial ends without an
  ``infra``/``task`` error.
- ``malformed_reply``: empty, non-JSON, truncated and binary-garbage replies never
  crash the trial: it ends on its own (no agent timeout) with no error or a
  ``model`` error, and a valid trajectory.
- ``agent_timeout``: a model that never answers (or a solution that never ends)
  under a 3 s agent timeout: the run is cancelled on time, classified ``model``,
  and leaves no asyncio task behind.
- ``engine_errors``: an endpoint answering HTTP 500 and an unreachable endpoint
  raise a :class:`~tackroom.TackroomError` classified ``infra``; a
  context-length rejection one classified ``model``; each within 60 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import secrets
import socket
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from tackroom._attempt import sandbox_spec
from tackroom._builtins.test_script_verifier import TestScriptVerifier
from tackroom._errors import TackroomError
from tackroom._harness import Harness
from tackroom._policy import Policy
from tackroom._runtime import TrialPlugins, TrialRuntime
from tackroom._sandbox import Sandbox, SandboxProvider
from tackroom._task import Task, load_task
from tackroom._trajectory import Trajectory
from tackroom._trial import Trial, TrialResult
from tackroom.testing._report import CheckReport, CheckResult, known_skips, timed_check
from tackroom.testing._tasks import write_task
from tackroom.testing.plugin_checks import check_plugin
from tackroom.testing.scripted_chat import ScriptedChatServerForTests, ScriptedReply

KIT_INSTRUCTION = "Create the file `/app/kit.txt` containing exactly one line: `kit-ok`"
KIT_SOLUTION = "echo kit-ok > /app/kit.txt"
"""A shell command that solves the kit's task; scripted replies type it."""
AGENT_TIMEOUT_SEC = 3.0

MALFORMED_REPLIES: list[str] = [
    "",
    "I will now create the file.",
    '{"analysis": "cut off in the middle',
    "```json\n{not: json, at all}\n```",
    "[1, 2, 3]",
    "\x00\x1b[31m\ufffd" * 20,
    '{"commands": "rm -rf /", "task_complete": "maybe"}',
]
"""What ``malformed_reply`` sends, in order (the last one repeats)."""

ALL_CHECKS = ("plugin", "solves_task", "max_turns", "malformed_reply", "agent_timeout", "engine_errors")


class HarnessScript(BaseModel):
    """What the scripted model says to a harness that calls one (in the harness's own reply format)."""

    solve: list[str]
    """Replies that solve the kit task (e.g. type :data:`KIT_SOLUTION`, then finish); the last one repeats."""
    idle: str
    """A valid reply that does nothing and does not finish the episode."""
    max_turns_option: str = "max_turns"
    """The harness option that bounds model calls per episode."""
    malformed: list[str] = Field(default_factory=lambda: list(MALFORMED_REPLIES))
    recorded: list[str | None] | None = None
    """What the trajectory's assistant messages hold for each ``solve`` reply (None: nothing to check), when a
    harness records them differently from the raw reply (e.g. tool-call markup parsed out of the text)."""


class HarnessCheckReport(CheckReport):
    """Every check's result."""

    harness: str
    sandbox: str

    @property
    def subject(self) -> str:
        return f"harness {self.harness!r} on sandbox {self.sandbox!r}"


KIT_TEST_SH = (
    "#!/bin/bash\nmkdir -p /logs/verifier\n"
    'if [ "$(cat /app/kit.txt 2>/dev/null)" = "kit-ok" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'
)
"""The kit task's test: reward 1 when ``/app/kit.txt`` holds ``kit-ok``, else 0."""


def write_kit_task(root: Path, *, name: str = "kit-task", agent_timeout_sec: float = 60.0,
                   solve_script: str = KIT_SOLUTION) -> Path:
    """Write the kit's task directory under ``root`` and return it (no Dockerfile: the provider's default image)."""
    return write_task(root, name, instruction=KIT_INSTRUCTION + "\n", test_sh=KIT_TEST_SH,
                      solve_sh=f"#!/bin/bash\n{solve_script}\n",
                      toml=f'version = "1.0"\n[agent]\ntimeout_sec = {agent_timeout_sec}\n[verifier]\ntimeout_sec = 30\n'
                           "[environment]\nmemory_mb = 2048\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ModelServer = Callable[..., contextlib.AbstractAsyncContextManager[Any]]
"""``factory(replies)`` → an async context manager yielding an object with ``policy()`` and ``requests``
(what :class:`ScriptedChatServerForTests` has); replies are strings or :class:`ScriptedReply`."""


class _Kit:
    """What every check shares: the harness under test, the provider, the task directories."""

    def __init__(self, harness_cls: type[Harness], options: dict[str, Any], provider: SandboxProvider,
                 script: HarnessScript | None, expected_reward: float | None, work: Path,
                 agent_timeout_sec: float, model_server: ModelServer | None = None) -> None:
        self.model_server = model_server or ScriptedChatServerForTests
        self.harness_cls = harness_cls
        self.options = options
        self.provider = provider
        self.script = script
        self.expected_reward = expected_reward
        self.task = load_task(write_kit_task(work, agent_timeout_sec=agent_timeout_sec))
        self.slow_task = load_task(write_kit_task(work, name="kit-slow-task", agent_timeout_sec=AGENT_TIMEOUT_SEC,
                                                  solve_script=f"{KIT_SOLUTION}\nsleep 600"))
        self.runtime = TrialRuntime(work / "runs", attempts=1, progress=False, teardown_timeout_sec=60)

    @property
    def needs_policy(self) -> bool:
        return "needs_policy" in self.harness_cls.capabilities

    async def attempt(self, task: Task, policy: Policy | None, **option_overrides: Any) -> tuple[TrialResult, Trajectory]:
        """One attempt through the real runtime (no retries), with the harness's options plus ``option_overrides``."""
        options = self.harness_cls.Options.model_validate({**self.options, **option_overrides})
        plugins = TrialPlugins(self.harness_cls, options, self.provider, TestScriptVerifier,
                               TestScriptVerifier.Options(), policy)
        trial = Trial(task_id=task.id, task_path=str(task.path), harness=self.harness_cls.name,
                      sandbox=self.provider.name, verifier="test-script", model=policy.model if policy else None)
        return await self.runtime.run_attempt(trial, task, plugins, 1)

    @contextlib.asynccontextmanager
    async def model(self, replies: list[str | ScriptedReply], **kwargs: Any) -> AsyncIterator[ScriptedChatServerForTests]:
        async with self.model_server(replies, **kwargs) as server:
            yield server


def _check_trajectory(trajectory: Trajectory, where: str) -> None:
    assert isinstance(trajectory, Trajectory), f"{where}: the harness returned {type(trajectory).__name__}, not a Trajectory"
    Trajectory.model_validate(trajectory.model_dump())  # aligned token fields, valid types
    assert trajectory.stop_reason, f"{where}: empty stop_reason"
    for key, value in trajectory.metrics.items():
        assert isinstance(value, int | float) and math.isfinite(value), f"{where}: metric {key!r} = {value!r} is not a finite number"
    for i, message in enumerate(trajectory.messages):
        assert isinstance(message, dict) and "role" in message, f"{where}: messages[{i}] has no role"


def _describe(result: TrialResult) -> str:
    if result.error is None:
        return f"reward {result.reward}, stop_reason {result.stop_reason!r}"
    e = result.error
    return f"{e.error_class} error {e.type} in {e.phase}: {e.message[:300]}"


# -- the checks -----------------------------------------------------------------------


async def check_solves_task(kit: _Kit) -> None:
    """The scripted episode (or the harness alone) scores the expected reward and records a valid trajectory."""
    if not kit.needs_policy:
        result, trajectory = await kit.attempt(kit.task, None)
        served: list[str] = []
    else:
        assert kit.script is not None, "a harness that calls a model needs a HarnessScript (script=...)"
        async with kit.model(list(kit.script.solve)) as server:
            result, trajectory = await kit.attempt(kit.task, server.policy())
        assert server.requests, f"the harness never called the model ({_describe(result)})"
        said_for = kit.script.recorded if kit.script.recorded is not None else kit.script.solve
        served = [said_for[min(i, len(said_for) - 1)] for i in range(len(server.requests))]
        served = [reply for reply in served if reply is not None]
    assert result.error is None, f"the scripted episode failed: {_describe(result)}"
    if kit.expected_reward is not None:
        assert result.reward == kit.expected_reward, (
            f"reward {result.reward}, expected {kit.expected_reward} ({_describe(result)}; verifier said "
            f"{str(result.reward_details.get('stdout', ''))[:200]!r})"
        )
    _check_trajectory(trajectory, "solves_task")
    said = [m.get("content") for m in trajectory.messages if m.get("role") == "assistant"]
    missing = [reply for reply in dict.fromkeys(served) if reply not in said]
    assert not missing, f"the trajectory's assistant messages do not record the model's replies: missing {missing[:2]!r}"


async def check_max_turns(kit: _Kit) -> None:
    """With the turn limit at 2 and a model that never finishes, at most 2 model calls are made."""
    assert kit.script is not None
    async with kit.model([kit.script.idle]) as server:
        result, trajectory = await kit.attempt(kit.task, server.policy(), **{kit.script.max_turns_option: 2})
    assert len(server.requests) <= 2, f"{len(server.requests)} model calls with {kit.script.max_turns_option} = 2"
    assert result.error is None or result.error.error_class == "model", f"the trial ended with {_describe(result)}"
    assert result.error is None or result.error.type != "AgentTimeoutError", "the episode did not stop at max turns"
    _check_trajectory(trajectory, "max_turns")


async def check_malformed_reply(kit: _Kit) -> None:
    """Malformed replies end the episode cleanly (no error or a ``model`` error), never a crash or a hang."""
    assert kit.script is not None
    async with kit.model(list(kit.script.malformed)) as server:
        result, trajectory = await kit.attempt(kit.task, server.policy(), **{kit.script.max_turns_option: 8})
    assert server.requests, f"the harness never called the model ({_describe(result)})"
    assert result.error is None or result.error.error_class == "model", (
        f"malformed model output crashed the trial: {_describe(result)}"
    )
    assert result.error is None or result.error.type != "AgentTimeoutError", (
        "malformed replies kept the harness going until the agent timeout; bound the retries"
    )
    _check_trajectory(trajectory, "malformed_reply")


async def check_agent_timeout(kit: _Kit) -> None:
    """A model that never answers (or a solution that never ends): cancelled on time, ``model`` class, no leaks."""
    before = asyncio.all_tasks()
    started = time.monotonic()
    if kit.needs_policy:
        assert kit.script is not None
        async with kit.model([ScriptedReply(content=kit.script.idle, delay_s=120)]) as server:
            result, _ = await kit.attempt(kit.slow_task, server.policy())
    else:
        result, _ = await kit.attempt(kit.slow_task, None)
    elapsed = time.monotonic() - started
    run_s = result.timings.get("harness_run", 0.0)
    assert run_s < AGENT_TIMEOUT_SEC + 2, f"harness_run took {run_s:.1f}s under a {AGENT_TIMEOUT_SEC:g}s agent timeout"
    if result.error is not None:
        assert result.error.error_class == "model", f"an agent timeout was classified {_describe(result)}"
    elif run_s >= AGENT_TIMEOUT_SEC:
        raise AssertionError("the harness ran past the agent timeout without an error")
    assert elapsed < AGENT_TIMEOUT_SEC + 120, f"the whole trial took {elapsed:.0f}s"
    await asyncio.sleep(0.05)
    current = asyncio.current_task()
    leaked = [t for t in asyncio.all_tasks() - before if t is not current and not t.done()]
    assert not leaked, f"tasks left running after the cancelled harness: {[t.get_name() for t in leaked][:5]}"


async def check_engine_errors(kit: _Kit) -> None:
    """A 500 and an unreachable endpoint raise ``infra`` TackroomErrors; a context rejection a ``model`` one."""
    assert kit.script is not None
    overflow = ScriptedReply(status=400, error_code="context_length_exceeded",
                             error_message="This model's maximum context length is 4096 tokens")
    cases: list[tuple[str, list[str | ScriptedReply] | None, str]] = [
        ("HTTP 500", [ScriptedReply(status=500, error_message="engine exploded")], "infra"),
        ("unreachable endpoint", None, "infra"),
        ("context length exceeded", [overflow], "model"),
    ]
    problems = []
    async with _started(kit) as sandbox:
        for label, replies, expected in cases:
            if replies is None:
                policy = Policy(base_url=f"http://127.0.0.1:{_free_port()}/v1", model="scripted")
                error = await _run_direct(kit, sandbox, policy)
            else:
                async with kit.model(replies) as server:
                    error = await _run_direct(kit, sandbox, server.policy())
            if error is None:
                problems.append(f"{label}: the harness returned normally instead of raising")
            elif not isinstance(error, TackroomError):
                problems.append(f"{label}: raised {type(error).__name__}: {str(error)[:200]} (not a classified TackroomError)")
            elif error.error_class != expected:
                problems.append(f"{label}: {type(error).__name__} is classified {error.error_class!r}, expected {expected!r}")
    assert not problems, "; ".join(problems)


@contextlib.asynccontextmanager
async def _started(kit: _Kit) -> AsyncIterator[Sandbox]:
    sandbox = kit.provider.create(sandbox_spec(kit.task, f"harness-check-{secrets.token_hex(4)}"))
    try:
        await asyncio.wait_for(sandbox.start(), 300)
        yield sandbox
    finally:
        await asyncio.shield(sandbox.stop())


async def _run_direct(kit: _Kit, sandbox: Sandbox, policy: Policy) -> BaseException | None:
    """A fresh harness's setup + run outside the runtime, so its own exception is visible; None when it returned."""
    harness = kit.harness_cls(kit.harness_cls.Options.model_validate(kit.options))
    await asyncio.wait_for(harness.setup(sandbox, kit.task), 300)
    deadline = asyncio.timeout(60)
    try:
        async with deadline:
            await harness.run(kit.task, sandbox, policy)
    except Exception as exc:
        if deadline.expired():
            return AssertionError("still running after 60 s; the harness must give up on a failing endpoint")
        return exc
    return None


_CHECKS: dict[str, Callable[[_Kit], Awaitable[None]]] = {
    "solves_task": check_solves_task,
    "max_turns": check_max_turns,
    "malformed_reply": check_malformed_reply,
    "agent_timeout": check_agent_timeout,
    "engine_errors": check_engine_errors,
}
_MODEL_CHECKS = ("max_turns", "malformed_reply", "engine_errors")


async def run_harness_checks(
    harness_cls: type[Harness],
    *,
    sandbox: SandboxProvider,
    options: dict[str, Any] | None = None,
    script: HarnessScript | None = None,
    expected_reward: float | None = 1.0,
    skip: Iterable[str] = (),
    agent_timeout_sec: float = 30.0,
    check_timeout_s: float = 300.0,
    model_server: ModelServer | None = None,
) -> HarnessCheckReport:
    """Run every check (those in ``skip`` are reported skipped) and return the report; see the module docstring.

    ``agent_timeout_sec`` is the kit task's agent timeout (all checks but
    ``agent_timeout``, which uses 3 s); ``check_timeout_s`` bounds each check;
    ``model_server`` replaces :class:`ScriptedChatServerForTests` as the scripted model.
    """
    skip = known_skips("harness", skip, ALL_CHECKS)

    async def plugin() -> None:
        check_plugin(harness_cls)

    results = [CheckResult.skipped_because("plugin") if "plugin" in skip else await timed_check("plugin", plugin(), 60)]
    with tempfile.TemporaryDirectory(prefix="tackroom-harness-check-") as tmp:
        kit = _Kit(harness_cls, dict(options or {}), sandbox, script, expected_reward, Path(tmp), agent_timeout_sec,
                   model_server)
        for name, check in _CHECKS.items():
            if name in skip:
                results.append(CheckResult.skipped_because(name))
            elif name in _MODEL_CHECKS and not kit.needs_policy:
                results.append(CheckResult.skipped_because(name, "the harness calls no model (no needs_policy capability)"))
            else:
                results.append(await timed_check(name, check(kit), check_timeout_s))
    return HarnessCheckReport(harness=harness_cls.name, sandbox=sandbox.name, results=results)


async def harness_self_check(harness_cls: type[Harness], **kwargs: Any) -> HarnessCheckReport:
    """:func:`run_harness_checks`, raising ``AssertionError`` listing every failed check."""
    report = await run_harness_checks(harness_cls, **kwargs)
    report.assert_ok()
    return report
