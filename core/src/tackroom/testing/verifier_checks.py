"""The verifier conformance suite: one call proves a verifier grades like the runtime and a trainer need.

A verifier's tests call

```python
from tackroom.testing import verifier_self_check

async def test_my_verifier_conforms():
    await verifier_self_check(MyVerifier, distribution="tackroom-mine")   # raises listing every failed check
```

or :func:`run_verifier_checks` for the :class:`VerifierCheckReport` without
raising. Each check drives the verifier the way the trial runtime does — a
fresh verifier per episode, a real sandbox (``local`` by default), ``prepare``
before the agent's turn, every process killed after it, ``verify``, the reward
checked against the task's ``[verifier] reward_range`` — but calls the verifier
itself, so what it raises is visible.

The agent's turn is a :class:`VerifierScenario`: shell commands and files it
leaves in the sandbox and the :class:`~tackroom.Trajectory` its harness
returned. Without ``task=``, the kit writes its own task
(:func:`write_verifier_kit_task`: write ``kit-ok`` to ``/app/kit.txt``) which
every first-party verifier can grade: ``tests/test.sh`` for ``test-script``,
``expected/app/kit.txt`` for ``file-diff``, a one-criterion ``[[rubric]]`` for
``rubric-judge``; its ``good`` scenario (:data:`KIT_GOOD`) writes ``kit-ok`` and
must score 1, its ``bad`` one (:data:`KIT_BAD`) writes ``kit-wrong``. With your
own task, pass ``good=`` and ``bad=`` scenarios for it.

Checks (names in :data:`ALL_CHECKS`; each under its own time limit):

- ``plugin``: name, strict ``Options``, docstring (:func:`check_plugin`).
- ``registered``: found through the ``tackroom`` entry-point group, from ``distribution``.
- ``options``: the options given validate; an unknown field is refused, naming it.
- ``scores_good``: the good scenario gets a :class:`~tackroom.Reward` whose score and
  components are finite and inside the task's reward range, whose details are JSON,
  and whose score is ``expected_score`` (when the scenario says).
- ``scores_bad_low``: the bad scenario's reward is in range, below the top of the
  range and below the good scenario's.
- ``planted_reward``: ``/logs/verifier/reward.txt`` and ``reward.json`` planted by
  the agent (saying the top score) do not change the bad scenario's reward. Skipped
  for a verifier that never touches ``/logs/verifier`` and whose reward they did
  not change (it does not read reward files).
- ``task_error``: a task the verifier cannot grade (default: instruction and
  task.toml only) raises an error classified ``task``, never a reward.
- ``sandbox_lost``: a sandbox that is gone by the time ``verify`` runs gives an
  ``infra`` error, never a reward, a ``task`` or a ``model`` error. Skipped when
  ``verify`` never calls the sandbox.
- ``service_down``: with ``infra_options`` (options that point the verifier's own
  service, e.g. its LLM judge, at something unreachable) the verifier raises an
  ``infra`` error. Skipped without ``infra_options``.
- ``cancel_verify``: when the sandbox stops answering, ``verify`` can be cancelled
  (as the runtime does at the verifier timeout): it ends within seconds and leaves
  no asyncio task running. Skipped when ``verify`` never calls the sandbox.

A check that cannot apply is reported ``skipped`` with the reason, never
``passed``. A verifier that needs something the author cannot supply here (an
LLM judge) passes ``cannot_grade="why"``: the checks that need a grade
(:data:`GRADING_CHECKS`) are then skipped with that reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import secrets
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tackroom._attempt import sandbox_spec
from tackroom._config import validate
from tackroom._errors import ConfigError, TackroomError
from tackroom._manager import get_plugin_manager
from tackroom._reward import Reward
from tackroom._sandbox import DEFAULT_EXEC_TIMEOUT, ExecResult, Sandbox, SandboxError, SandboxProvider
from tackroom._task import Task, load_task
from tackroom._trajectory import Trajectory
from tackroom._verifier import Verifier
from tackroom.testing._report import CheckReport, CheckResult, SkipCheck, known_skips, timed_check
from tackroom.testing._tasks import write_task
from tackroom.testing.harness_checks import KIT_INSTRUCTION, KIT_SOLUTION, KIT_TEST_SH
from tackroom.testing.plugin_checks import check_plugin, check_registered

REWARD_DIR = "/logs/verifier"
"""Where Harbor-style tests write their reward (``reward.txt`` or ``reward.json``)."""
UNKNOWN_OPTION = "no_such_option_tackroom_kit"
CANCEL_AFTER_SEC = 2.0
"""How long ``cancel_verify`` lets ``verify`` wait on a sandbox that never answers before cancelling it."""
CANCEL_GRACE_SEC = 5.0
"""How long a cancelled ``verify`` may take to end."""

ALL_CHECKS = ("plugin", "registered", "options", "scores_good", "scores_bad_low", "planted_reward", "task_error",
              "sandbox_lost", "service_down", "cancel_verify")
GRADING_CHECKS = frozenset({"scores_good", "scores_bad_low", "planted_reward", "sandbox_lost", "cancel_verify"})
"""Checks that need ``verify`` to reach a grade; skipped when ``cannot_grade`` says why it cannot here."""


@dataclass
class VerifierScenario:
    """The agent's turn before grading: what it leaves in the sandbox and the trajectory its harness returns.

    Run in this order after ``prepare``: ``files`` written, ``commands`` run by bash in ``/`` (they must exit 0),
    then ``act(sandbox, task)`` for anything else.
    """

    commands: str = ""
    files: dict[str, str | bytes] = field(default_factory=dict)
    trajectory: Trajectory = field(default_factory=lambda: Trajectory(stop_reason="completed"))
    act: Callable[[Sandbox, Task], Awaitable[None]] | None = None
    expected_score: float | None = None
    """The score this episode must get (None: only the range, and for ``bad`` the ordering, are checked)."""

    async def play(self, sandbox: Sandbox, task: Task) -> None:
        for path, content in self.files.items():
            await sandbox.write_file(path, content)
        if self.commands.strip():
            r = await sandbox.exec(self.commands, cwd="/", timeout=120)
            if not r.ok:
                raise RuntimeError(f"the scenario's commands failed (exit {r.exit_code}): {(r.stderr or r.stdout)[-500:]}")
        if self.act is not None:
            await self.act(sandbox, task)


KIT_ANSWER = "I wrote kit-ok to /app/kit.txt."
KIT_GOOD = VerifierScenario(
    commands=KIT_SOLUTION,
    trajectory=Trajectory(messages=[{"role": "user", "content": KIT_INSTRUCTION},
                                    {"role": "assistant", "content": KIT_ANSWER}], final_answer=KIT_ANSWER),
    expected_score=1.0,
)
"""The kit task solved: ``/app/kit.txt`` holds ``kit-ok`` and the answer says so."""
KIT_BAD = VerifierScenario(
    commands="echo kit-wrong > /app/kit.txt",
    trajectory=Trajectory(messages=[{"role": "user", "content": KIT_INSTRUCTION},
                                    {"role": "assistant", "content": "I wrote kit-wrong to /app/kit.txt."}],
                          final_answer="I wrote kit-wrong to /app/kit.txt."),
)
"""The kit task done wrong: ``/app/kit.txt`` holds ``kit-wrong``, and the answer says so."""
KIT_CRITERION = "The file /app/kit.txt contains exactly one line: kit-ok"


def write_verifier_kit_task(root: Path, *, name: str = "verifier-kit-task",
                            reward_range: tuple[float, float] | None = None) -> Path:
    """Write the kit's task under ``root`` and return its directory: gradeable by test-script, file-diff and rubric-judge.

    ``tests/test.sh`` writes 1 or 0 to ``/logs/verifier/reward.txt``; ``expected/app/kit.txt`` holds ``kit-ok``;
    ``task.toml`` lists ``/app/kit.txt`` in ``expected_outputs`` and has one ``[[rubric]]`` criterion.
    """
    range_line = f"reward_range = [{reward_range[0]}, {reward_range[1]}]\n" if reward_range else ""
    return write_task(root, name, instruction=KIT_INSTRUCTION + "\n", test_sh=KIT_TEST_SH,
                      solve_sh=f"#!/bin/bash\n{KIT_SOLUTION}\n", files={"expected/app/kit.txt": "kit-ok\n"},
                      toml='version = "1.0"\nexpected_outputs = ["/app/kit.txt"]\n'
                           f"[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 30\n{range_line}"
                           "[environment]\nmemory_mb = 2048\n"
                           f'[[rubric]]\nid = "kit-file"\ncriterion = "{KIT_CRITERION}"\n')


def write_ungradeable_task(root: Path, *, name: str = "verifier-kit-ungradeable") -> Path:
    """A task with nothing to grade it by: ``instruction.md`` and ``task.toml`` only (no tests, expected files or rubric)."""
    return write_task(root, name, instruction=KIT_INSTRUCTION + "\n", toml='version = "1.0"\n[verifier]\ntimeout_sec = 30\n')


class VerifierCheckReport(CheckReport):
    """Every check's result."""

    verifier: str
    sandbox: str

    @property
    def subject(self) -> str:
        return f"verifier {self.verifier!r} on sandbox {self.sandbox!r}"


# -- a sandbox the kit can watch, lose or freeze --------------------------------------------------


class _WatchedSandbox(Sandbox):
    """What ``verify`` is handed: the real sandbox, recording which methods are called; ``frozen`` never answers."""

    def __init__(self, inner: Sandbox, *, frozen: bool = False) -> None:
        super().__init__(inner.spec)
        self.inner = inner
        self.notes = inner.notes
        self.frozen = frozen
        self.calls: list[str] = []
        self._release = asyncio.Event()

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(name)
        if self.frozen:
            await self._release.wait()
            raise SandboxError("the kit's frozen sandbox was released")
        return await getattr(self.inner, name)(*args, **kwargs)

    def release(self) -> None:
        self._release.set()

    async def start(self) -> None:
        await self._call("start")

    async def exec(self, cmd: str | list[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout: float = DEFAULT_EXEC_TIMEOUT, stdin: str | bytes | None = None) -> ExecResult:
        return await self._call("exec", cmd, cwd=cwd, env=env, timeout=timeout, stdin=stdin)

    async def upload(self, source: Path, dest: str, *, timeout: float = 120.0) -> None:
        await self._call("upload", source, dest, timeout=timeout)

    async def download(self, source: str, dest: Path, *, timeout: float = 120.0) -> None:
        await self._call("download", source, dest, timeout=timeout)

    async def write_file(self, path: str, content: str | bytes, *, timeout: float = 60.0) -> None:
        await self._call("write_file", path, content, timeout=timeout)

    async def read_file(self, path: str, *, timeout: float = 60.0) -> bytes:
        return await self._call("read_file", path, timeout=timeout)

    async def expose(self, port: int) -> str:
        return await self._call("expose", port)

    async def forward_host_port(self, port: int) -> str:
        return await self._call("forward_host_port", port)

    async def snapshot(self, paths: list[str], *, timeout: float = 120.0) -> bytes:
        return await self._call("snapshot", paths, timeout=timeout)

    async def kill_processes(self, *, timeout: float = 10.0) -> None:
        await self._call("kill_processes", timeout=timeout)

    async def stop(self) -> None:
        await self._call("stop")


# -- what every check shares ----------------------------------------------------------------------


@dataclass
class _Graded:
    """One episode's outcome: the reward or what was raised, and what ``verify`` did with the sandbox."""

    reward: Reward | None = None
    error: BaseException | None = None
    calls: list[str] = field(default_factory=list)
    after: Any = None

    def describe(self) -> str:
        if self.reward is not None:
            return f"score {self.reward.score!r}"
        return _describe_error(self.error)


def _describe_error(error: BaseException | None) -> str:
    if error is None:
        return "no error"
    cls = getattr(error, "error_class", None)
    return f"{type(error).__name__} ({f'classified {cls!r}' if cls else 'unclassified: the runtime counts it infra'}): " \
           f"{str(error)[:300]}"


class _Kit:
    def __init__(self, verifier_cls: type[Verifier], options: dict[str, Any], provider: SandboxProvider,
                 task: Task, good: VerifierScenario | None, bad: VerifierScenario | None, ungradeable: Task,
                 infra_options: dict[str, Any] | None, cannot_grade: str | None, distribution: str | None) -> None:
        self.verifier_cls = verifier_cls
        self.options = options
        self.provider = provider
        self.task = task
        self.good = good
        self.bad = bad
        self.ungradeable = ungradeable
        self.infra_options = infra_options
        self.cannot_grade = cannot_grade
        self.distribution = distribution
        self.good_score: float | None = None
        self.bad_outcome: _Graded | None = None

    @property
    def high(self) -> float:
        return self.task.config.verifier.reward_range[1]

    def verifier(self, extra: dict[str, Any] | None = None) -> Verifier:
        """A fresh verifier (the runtime builds one per attempt), with the kit's options plus ``extra``."""
        return self.verifier_cls(self.verifier_cls.Options.model_validate({**self.options, **(extra or {})}))

    @contextlib.asynccontextmanager
    async def sandbox(self, task: Task) -> AsyncIterator[Sandbox]:
        sandbox = self.provider.create(sandbox_spec(task, f"verifier-check-{secrets.token_hex(4)}"))
        try:
            await asyncio.wait_for(sandbox.start(), 300)
            yield sandbox
        finally:
            await asyncio.shield(sandbox.stop())

    async def grade(self, scenario: VerifierScenario, *, task: Task | None = None, options: dict[str, Any] | None = None,
                    plant: bool = False, lose_sandbox: bool = False,
                    after: Callable[[Sandbox], Awaitable[Any]] | None = None) -> _Graded:
        """One episode as the runtime runs it; what ``prepare``/``verify`` raise is returned, not raised."""
        task = task or self.task
        graded = _Graded()
        async with self.sandbox(task) as sandbox:
            verifier = self.verifier(options)
            try:
                await verifier.prepare(task, sandbox)
            except Exception as exc:  # what the verifier raises is what is checked
                graded.error = exc
                return graded
            await scenario.play(sandbox, task)
            if plant:
                await plant_rewards(sandbox, self.high)
            await sandbox.kill_processes(timeout=30)
            if lose_sandbox:
                await sandbox.stop()
            watched = _WatchedSandbox(sandbox)
            try:
                graded.reward = await verifier.verify(task, watched, scenario.trajectory)
            except Exception as exc:  # reported below
                graded.error = exc
            graded.calls = watched.calls
            if after is not None and not lose_sandbox:
                graded.after = await after(sandbox)
        return graded

    def check_reward(self, graded: _Graded, what: str, task: Task | None = None) -> Reward:
        task = task or self.task
        if graded.error is not None:
            raise AssertionError(f"{what}: prepare/verify raised {_describe_error(graded.error)}")
        reward = graded.reward
        assert isinstance(reward, Reward), f"{what}: verify returned {type(reward).__name__}, not a tackroom.Reward"
        low, high = task.config.verifier.reward_range
        try:
            reward.check_range(low, high, where=f"{what}: verifier {self.verifier_cls.name!r}")
        except TackroomError as exc:
            raise AssertionError(str(exc)) from None
        try:
            json.dumps(reward.model_dump(mode="json"))
        except (TypeError, ValueError) as exc:
            raise AssertionError(f"{what}: the reward's details do not serialise to JSON (result.json): {exc}") from None
        return reward


async def plant_rewards(sandbox: Sandbox, score: float) -> None:
    """What a cheating agent leaves: ``/logs/verifier/reward.txt`` and ``reward.json`` claiming ``score``."""
    r = await sandbox.exec(
        f"mkdir -p {REWARD_DIR} && printf '%s\\n' {score!r} > {REWARD_DIR}/reward.txt && "
        f"printf '%s\\n' '{json.dumps({'reward': score})}' > {REWARD_DIR}/reward.json", cwd="/", timeout=30)
    if not r.ok:
        raise RuntimeError(f"could not plant reward files: {r.stderr.strip()[:300]}")


async def _reward_files(sandbox: Sandbox) -> dict[str, bytes | None]:
    found: dict[str, bytes | None] = {}
    for name in ("reward.txt", "reward.json"):
        try:
            found[name] = await sandbox.read_file(f"{REWARD_DIR}/{name}")
        except (FileNotFoundError, IsADirectoryError, SandboxError):
            found[name] = None
    return found


def _needs_grading(kit: _Kit, scenario: VerifierScenario | None, which: str) -> VerifierScenario:
    if kit.cannot_grade:
        raise SkipCheck(f"cannot grade here: {kit.cannot_grade}")
    if scenario is None:
        raise SkipCheck(f"no {which} scenario given ({which}=VerifierScenario(...) for the task passed)")
    return scenario


# -- the checks -----------------------------------------------------------------------------------


async def check_plugin_shape(kit: _Kit) -> None:
    """The class has a valid name, a strict ``Options`` model, capabilities and a docstring (``check_plugin``)."""
    check_plugin(kit.verifier_cls)


async def check_registration(kit: _Kit) -> None:
    """A fresh plugin manager finds the verifier by name through the ``tackroom`` entry points, from ``distribution``."""
    loaded = check_registered("verifier", kit.verifier_cls.name, distribution=kit.distribution)
    assert loaded is kit.verifier_cls, (
        f"the entry point registers {loaded!r} as verifier {kit.verifier_cls.name!r}, not {kit.verifier_cls!r}"
    )


async def check_options(kit: _Kit) -> None:
    """The options given validate; an unknown option is refused by ``Options`` and by the constructor, naming it."""
    try:
        validate(kit.verifier_cls.Options, kit.options, prefix="verifier")
    except ConfigError as exc:
        raise AssertionError(f"the options given do not validate: {exc}") from None
    try:
        validate(kit.verifier_cls.Options, {**kit.options, UNKNOWN_OPTION: 1}, prefix="verifier")
    except ConfigError as exc:
        assert f"verifier.{UNKNOWN_OPTION}: unknown field" in str(exc), (
            f"an unknown option was refused without naming it: {exc}"
        )
    else:
        raise AssertionError("Options accepted an unknown field; it must forbid extras (subclass tackroom.PluginOptions)")
    try:
        kit.verifier_cls({**kit.options, UNKNOWN_OPTION: 1})
    except (ValueError, TypeError) as exc:
        assert UNKNOWN_OPTION in str(exc), f"the constructor refused an unknown option without naming it: {exc}"
    else:
        raise AssertionError(f"{kit.verifier_cls.__name__}({{{UNKNOWN_OPTION!r}: 1}}) was accepted; the constructor "
                             "must validate its options (leave Plugin.__init__ in charge)")


async def check_scores_good(kit: _Kit) -> None:
    """The good episode gets a ``Reward``: finite, inside the task's reward range, JSON details, the expected score."""
    good = _needs_grading(kit, kit.good, "good")
    reward = kit.check_reward(await kit.grade(good), "the good scenario")
    if good.expected_score is not None:
        assert math.isclose(reward.score, good.expected_score, abs_tol=1e-9), (
            f"the good scenario scored {reward.score!r}, expected {good.expected_score!r} (components {reward.components})"
        )
    kit.good_score = reward.score


async def _bad_outcome(kit: _Kit, bad: VerifierScenario) -> _Graded:
    if kit.bad_outcome is None:
        kit.bad_outcome = await kit.grade(bad)
    return kit.bad_outcome


async def check_scores_bad_low(kit: _Kit) -> None:
    """The bad episode's reward is in range and does not score the top of it, nor as high as the good episode."""
    bad = _needs_grading(kit, kit.bad, "bad")
    reward = kit.check_reward(await _bad_outcome(kit, bad), "the bad scenario")
    assert reward.score < kit.high, (
        f"the bad scenario scored {reward.score!r}, the top of the range: the verifier does not tell a bad episode "
        "from a good one"
    )
    if kit.good_score is not None:
        assert reward.score < kit.good_score, (
            f"the bad scenario scored {reward.score!r}, not below the good scenario's {kit.good_score!r}"
        )
    if bad.expected_score is not None:
        assert math.isclose(reward.score, bad.expected_score, abs_tol=1e-9), (
            f"the bad scenario scored {reward.score!r}, expected {bad.expected_score!r}"
        )


async def check_planted_reward(kit: _Kit) -> None:
    """Reward files the agent planted in /logs/verifier (claiming the top score) do not change the bad episode's reward."""
    bad = _needs_grading(kit, kit.bad, "bad")
    honest = await _bad_outcome(kit, bad)
    planted = await kit.grade(bad, plant=True, after=_reward_files)
    planted_bytes = {"reward.txt": f"{kit.high!r}\n".encode(), "reward.json": (json.dumps({"reward": kit.high}) + "\n").encode()}
    touched = planted.after is not None and planted.after != planted_bytes
    if planted.reward is not None and honest.reward is None:
        raise AssertionError(f"with reward files planted the bad scenario scored {planted.reward.score!r}; without them "
                             f"it raised {_describe_error(honest.error)}: the planted files became the reward")
    if planted.reward is not None and honest.reward is not None:
        assert math.isclose(planted.reward.score, honest.reward.score, abs_tol=1e-9), (
            f"reward files planted by the agent changed the bad scenario's score from {honest.reward.score!r} to "
            f"{planted.reward.score!r}; recreate {REWARD_DIR} empty before the tests run"
        )
        assert planted.reward.components == honest.reward.components, (
            f"reward files planted by the agent changed the components from {honest.reward.components} to "
            f"{planted.reward.components}"
        )
    elif planted.reward is None and honest.reward is not None:
        raise AssertionError(f"reward files planted by the agent made grading fail: {_describe_error(planted.error)}")
    if not touched:
        raise SkipCheck(f"the planted reward files changed nothing and the verifier left {REWARD_DIR} as planted: it "
                        "does not read reward files")


async def check_task_error(kit: _Kit) -> None:
    """A task the verifier cannot grade raises an error classified ``task`` (never a reward, never retried as infra)."""
    graded = await kit.grade(VerifierScenario(), task=kit.ungradeable)
    if graded.reward is not None:
        raise AssertionError(f"a task it cannot grade ({kit.ungradeable.path.name}) got {graded.describe()}; raise "
                             "tackroom.TaskError (a broken task is never a pass)")
    cls = getattr(graded.error, "error_class", None)
    assert cls == "task", (
        f"a task it cannot grade raised {_describe_error(graded.error)}; raise tackroom.TaskError so it is not retried"
    )


async def check_sandbox_lost(kit: _Kit) -> None:
    """A sandbox gone before ``verify`` gives an ``infra`` error (retried), never a reward nor a task/model error."""
    good = _needs_grading(kit, kit.good, "good")
    graded = await kit.grade(good, lose_sandbox=True)
    if not graded.calls:
        raise SkipCheck("verify never calls the sandbox, so losing it cannot matter")
    if graded.reward is not None:
        raise AssertionError(f"graded {graded.describe()} from a sandbox that was gone ({graded.calls[0]} failed); "
                             "let the sandbox's error through (infra) instead of scoring")
    cls = getattr(graded.error, "error_class", None)
    assert cls in (None, "infra"), (
        f"a lost sandbox became {_describe_error(graded.error)}; it is the machinery's fault (infra), so the trial is "
        "retried, not counted"
    )


async def check_service_down(kit: _Kit) -> None:
    """With its own service unreachable (``infra_options``) the verifier raises an ``infra`` error, never a score."""
    if kit.infra_options is None:
        raise SkipCheck("no infra_options given: the verifier has no service of its own (an LLM judge, an API) to "
                        "take down")
    scenario = kit.good or KIT_GOOD
    graded = await kit.grade(scenario, options=kit.infra_options)
    if graded.reward is not None:
        raise AssertionError(f"graded {graded.describe()} with its service down; raise tackroom.InfraError (retried)")
    cls = getattr(graded.error, "error_class", None)
    assert cls == "infra", f"a service that is down became {_describe_error(graded.error)}; expected tackroom.InfraError"


async def check_cancel_verify(kit: _Kit) -> None:
    """With a sandbox that stops answering, ``verify`` is cancelled within seconds and leaves no asyncio task behind."""
    good = _needs_grading(kit, kit.good, "good")
    verifier = kit.verifier()
    async with kit.sandbox(kit.task) as sandbox:
        await verifier.prepare(kit.task, sandbox)
        await good.play(sandbox, kit.task)
        await sandbox.kill_processes(timeout=30)
        frozen = _WatchedSandbox(sandbox, frozen=True)
        before = asyncio.all_tasks()
        job = asyncio.ensure_future(verifier.verify(kit.task, frozen, good.trajectory))
        done, _ = await asyncio.wait({job}, timeout=CANCEL_AFTER_SEC)
        try:
            if done:
                if job.exception() is None:
                    if not frozen.calls:
                        raise SkipCheck("verify never calls the sandbox, so a sandbox that stops answering cannot matter")
                    raise AssertionError(f"graded score {job.result().score!r} while the sandbox never answered "
                                         f"({frozen.calls[0]} hung)")
                error = job.exception()
                cls = getattr(error, "error_class", None)
                assert cls in (None, "infra"), (
                    f"a sandbox that stopped answering became {_describe_error(error)}; expected it to wait to be "
                    "cancelled or raise an infra error"
                )
                return
            job.cancel()
            cancelled_at = time.monotonic()
            done, _ = await asyncio.wait({job}, timeout=CANCEL_GRACE_SEC)
            assert done, f"verify still ran {CANCEL_GRACE_SEC:g}s after it was cancelled; it must not swallow CancelledError"
            waited = time.monotonic() - cancelled_at
            assert waited < CANCEL_GRACE_SEC, f"a cancelled verify took {waited:.1f}s to end"
            await asyncio.sleep(0.05)
            current = asyncio.current_task()
            leaked = [t for t in asyncio.all_tasks() - before if t is not current and not t.done()]
            assert not leaked, f"tasks left running after verify was cancelled: {[t.get_name() for t in leaked][:5]}"
        finally:
            frozen.release()
            if not job.done():
                job.cancel()


_CHECKS: dict[str, Callable[[_Kit], Awaitable[None]]] = {
    "plugin": check_plugin_shape,
    "registered": check_registration,
    "options": check_options,
    "scores_good": check_scores_good,
    "scores_bad_low": check_scores_bad_low,
    "planted_reward": check_planted_reward,
    "task_error": check_task_error,
    "sandbox_lost": check_sandbox_lost,
    "service_down": check_service_down,
    "cancel_verify": check_cancel_verify,
}
assert tuple(_CHECKS) == ALL_CHECKS


async def run_verifier_checks(
    verifier_cls: type[Verifier],
    *,
    options: dict[str, Any] | None = None,
    sandbox: SandboxProvider | None = None,
    task: str | Path | Task | None = None,
    good: VerifierScenario | None = None,
    bad: VerifierScenario | None = None,
    ungradeable_task: str | Path | Task | None = None,
    infra_options: dict[str, Any] | None = None,
    cannot_grade: str | None = None,
    distribution: str | None = None,
    skip: Iterable[str] = (),
    check_timeout_s: float = 120.0,
) -> VerifierCheckReport:
    """Run every check (those in ``skip`` are reported skipped) and return the report; see the module docstring.

    ``options``: the verifier's options (as under ``[verifier]``). ``sandbox``: the provider episodes run on
    (default ``local``). ``task``: a task directory (or loaded Task) with ``good``/``bad`` scenarios for it;
    default the kit's own task with :data:`KIT_GOOD`/:data:`KIT_BAD`. ``ungradeable_task``: what
    ``task_error`` uses (default :func:`write_ungradeable_task`). ``infra_options``: option overrides that take
    the verifier's own service down (``service_down``). ``cannot_grade``: why ``verify`` cannot reach a grade here
    (skips :data:`GRADING_CHECKS`). ``distribution``: the distribution ``registered`` expects.
    ``check_timeout_s`` bounds each check.
    """
    skip = known_skips("verifier", skip, ALL_CHECKS)
    if sandbox is None:
        sandbox = get_plugin_manager().get("sandbox", "local")()  # the default; its install line when missing
    with tempfile.TemporaryDirectory(prefix="tackroom-verifier-check-") as tmp:
        work = Path(tmp)
        if task is None:
            loaded = load_task(write_verifier_kit_task(work))
            good = good if good is not None else KIT_GOOD
            bad = bad if bad is not None else KIT_BAD
        else:
            loaded = task if isinstance(task, Task) else load_task(Path(task))
        if ungradeable_task is None:
            broken = load_task(write_ungradeable_task(work))
        else:
            broken = ungradeable_task if isinstance(ungradeable_task, Task) else load_task(Path(ungradeable_task))
        kit = _Kit(verifier_cls, dict(options or {}), sandbox, loaded, good, bad, broken, infra_options, cannot_grade,
                   distribution)
        results = [CheckResult.skipped_because(name) if name in skip else await timed_check(name, check(kit), check_timeout_s)
                   for name, check in _CHECKS.items()]
    return VerifierCheckReport(verifier=verifier_cls.name, sandbox=sandbox.name, results=results)


async def verifier_self_check(verifier_cls: type[Verifier], **kwargs: Any) -> VerifierCheckReport:
    """:func:`run_verifier_checks`, raising ``AssertionError`` listing every failed check; the report when none failed."""
    report = await run_verifier_checks(verifier_cls, **kwargs)
    report.assert_ok()
    return report


__all__ = [
    "ALL_CHECKS",
    "GRADING_CHECKS",
    "KIT_BAD",
    "KIT_GOOD",
    "VerifierCheckReport",
    "VerifierScenario",
    "plant_rewards",
    "run_verifier_checks",
    "verifier_self_check",
    "write_ungradeable_task",
    "write_verifier_kit_task",
]
