"""The ``test-script`` verifier, with Harbor's semantics: run tests/test.sh, read the reward it writes."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from pydantic import Field

from tackroom._errors import SandboxTimeoutError, TaskError
from tackroom._grading import prepare_grading, workdir_of
from tackroom._markers import hookimpl
from tackroom._plugin import PluginOptions
from tackroom._reward import Reward
from tackroom._sandbox import Sandbox
from tackroom._task import Task
from tackroom._trajectory import Trajectory
from tackroom._verifier import Verifier

REWARD_DIR = "/logs/verifier"


class TestScriptOptions(PluginOptions):
    __test__ = False
    tests_dir: str = Field(default="/tests", description="Where tests/ is uploaded")
    keep_output_chars: int = Field(default=4000, description="How much of test.sh's output goes into details")


class TestScriptVerifier(Verifier):
    """Runs tests/test.sh under the verifier timeout; reward from /logs/verifier/reward.json or reward.txt.

    /logs/verifier and /tests are recreated empty (grader-owned) before the tests are uploaded (an agent that
    makes that impossible has failed: ``model``, reward 0); a FIFO, socket or device file the agent left where
    test.sh reads (the working directory, ``[verifier] grading_paths``) is sabotage (``model``, reward 0).
    test.sh runs through :meth:`Sandbox.run_grader`: both folders private to it and its children, a clean
    environment, services the agent left listening resumed only for its run; the reward is read from the host
    copy of its /logs/verifier, never from the sandbox's.
    """

    name = "test-script"
    __test__ = False  # not a pytest class, despite the name
    Options = TestScriptOptions

    async def verify(self, task: Task, sandbox: Sandbox, trajectory: Trajectory) -> Reward:
        script = task.tests_dir / "test.sh"
        if not script.is_file():
            raise TaskError(f"{script}: missing; the test-script verifier needs tests/test.sh")
        # An image or an agent must not be able to plant a reward, nor a test file (a conftest.py that
        # steers pytest): both folders are recreated empty first, then /tests gets exactly the task's files
        # (the agent's processes are gone or frozen, so nothing writes into them any more). One command does
        # both folders and the search for FIFOs and devices where test.sh reads.
        tests, config, timeout = self.options.tests_dir, task.config.verifier, task.config.verifier.timeout_sec
        read = [workdir_of(sandbox), *config.grading_paths]
        await prepare_grading(sandbox, [REWARD_DIR, tests], read)
        await sandbox.upload(task.tests_dir, tests)
        with tempfile.TemporaryDirectory(prefix="tackroom-reward-") as tmp:
            dest = Path(tmp) / "verifier"
            try:
                result = await sandbox.run_grader(["bash", f"{tests}/test.sh"], private=[tests, REWARD_DIR],
                                                  collect=REWARD_DIR, dest=dest, env=config.env, timeout=timeout,
                                                  graded=[] if config.grade_service_writes else read)
            except SandboxTimeoutError as exc:
                raise TaskError(f"tests/test.sh ran past the verifier timeout ({timeout}s)") from exc
            except FileNotFoundError as exc:
                raise TaskError(f"tests/test.sh removed {REWARD_DIR}, so it left no reward; a missing reward is "
                                "never a pass") from exc
            keep = self.options.keep_output_chars
            details = {"exit_code": result.exit_code, "stdout": result.stdout[-keep:], "stderr": result.stderr[-keep:]}
            reward = _read_reward(dest)
        if reward is None:
            raise TaskError(
                f"tests/test.sh (exit {result.exit_code}) wrote neither {REWARD_DIR}/reward.json nor reward.txt; "
                f"a missing reward is never a pass. Output: {(result.stdout + result.stderr)[-500:]}"
            )
        reward.details.update(details)
        return reward


def _read_file(folder: Path, name: str) -> bytes | None:
    """A regular file of the grader's copy, never through a link (a link there is no reward)."""
    path = folder / name
    if not path.is_file() or path.is_symlink():
        return None
    with path.open("rb") as f:
        return f.read(1 << 20)  # a reward is a number or a small object; the rest is never needed


def _read_reward(folder: Path) -> Reward | None:
    raw = _read_file(folder, "reward.json")
    if raw is not None:
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise TaskError(f"{REWARD_DIR}/reward.json is not JSON: {exc}") from exc
        if not isinstance(data, dict) or not data or not all(_is_number(v) for v in data.values()):
            raise TaskError(f"{REWARD_DIR}/reward.json must be a non-empty object of numbers, got {raw[:200]!r}")
        components = {k: float(v) for k, v in data.items()}
        score = components.get("reward", sum(components.values()) / len(components))
        return Reward(score=score, components=components, details={"source": "reward.json"})
    raw = _read_file(folder, "reward.txt")
    if raw is None:
        return None
    text = raw.decode(errors="replace").strip()
    try:
        score = float(text)
    except ValueError as exc:
        raise TaskError(f"{REWARD_DIR}/reward.txt must hold one number, got {text[:200]!r}") from exc
    if not math.isfinite(score):
        raise TaskError(f"{REWARD_DIR}/reward.txt holds {text!r}, not a finite number")
    return Reward(score=score, components={"reward": score}, details={"source": "reward.txt"})


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@hookimpl
def tackroom_verifiers(register) -> None:
    register.add_verifier(TestScriptVerifier)
