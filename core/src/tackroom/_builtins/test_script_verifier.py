"""The ``test-script`` verifier, with Harbor's semantics: run tests/test.sh, read the reward it writes."""

from __future__ import annotations

import json
import math

from pydantic import Field

from tackroom._errors import TaskError
from tackroom._grading import prepare_grading, workdir_of
from tackroom._markers import hookimpl
from tackroom._plugin import PluginOptions
from tackroom._reward import Reward
from tackroom._sandbox import Sandbox, SandboxTimeoutError
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

    /logs/verifier and /tests are recreated empty before the tests are uploaded (an agent that makes that
    impossible has failed: ``model``, reward 0); a FIFO, socket or device file the agent left where test.sh
    reads (the working directory, ``[verifier] grading_paths``) is sabotage (``model``, reward 0); every
    process test.sh left running is killed before the reward is read.
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
        # (the runtime has killed every process the agent started, so nothing writes into them any more).
        # One command does both folders and the search for FIFOs and devices where test.sh reads.
        await prepare_grading(sandbox, [REWARD_DIR, self.options.tests_dir],
                              [workdir_of(sandbox), *task.config.verifier.grading_paths])
        await sandbox.upload(task.tests_dir, self.options.tests_dir)
        timeout = task.config.verifier.timeout_sec
        try:
            result = await sandbox.exec(
                f"bash {self.options.tests_dir}/test.sh", env=task.config.verifier.env, timeout=timeout
            )
        except SandboxTimeoutError as exc:
            raise TaskError(f"tests/test.sh ran past the verifier timeout ({timeout}s)") from exc
        # Whatever test.sh started in the background stops before the reward is read.
        await sandbox.kill_processes()
        keep = self.options.keep_output_chars
        details = {"exit_code": result.exit_code, "stdout": result.stdout[-keep:], "stderr": result.stderr[-keep:]}
        reward = await self._read_reward(sandbox)
        if reward is None:
            raise TaskError(
                f"tests/test.sh (exit {result.exit_code}) wrote neither {REWARD_DIR}/reward.json nor reward.txt; "
                f"a missing reward is never a pass. Output: {(result.stdout + result.stderr)[-500:]}"
            )
        reward.details.update(details)
        return reward

    async def _read_reward(self, sandbox: Sandbox) -> Reward | None:
        try:
            raw = await sandbox.read_file(f"{REWARD_DIR}/reward.json")
        except FileNotFoundError:
            raw = None
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
        try:
            text = (await sandbox.read_file(f"{REWARD_DIR}/reward.txt")).decode(errors="replace").strip()
        except FileNotFoundError:
            return None
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
