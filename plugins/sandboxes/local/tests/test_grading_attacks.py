"""Attacks on grading in the ``local`` sandbox: the reward channel, services kept into grading, the grader's
interpreters, the grading phase's network and exhaustion. Every test plays the agent inside a real bubblewrap
sandbox (or a real trial whose "solution" is the attack) and then reads what grading saw."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import tackroom
from tackroom import Trial
from tackroom.app import TrialPlugins, TrialRuntime
from tackroom_local import LocalSandbox, LocalSandboxProvider


@pytest.fixture
async def make(tmp_path):
    """Start local sandboxes whose roots live in the test's folder; all are stopped afterwards."""
    made: list[LocalSandbox] = []

    async def make(spec: dict | None = None, **options) -> LocalSandbox:
        provider = LocalSandboxProvider({"root_dir": str(tmp_path / "roots"), **options})
        sb = provider.create(tackroom.SandboxSpec(name="grading", **(spec or {})))
        made.append(sb)
        await sb.start()
        return sb

    yield make
    for sb in made:
        await sb.stop()


async def run_task(tmp_path: Path, solve: str, test_sh: str, toml: str = "") -> tackroom.TrialResult:
    """One real trial of a task whose oracle solution is ``solve`` and whose grader is ``test_sh``."""
    task_dir = tmp_path / "task"
    for sub in ("tests", "solution"):
        (task_dir / sub).mkdir(parents=True)
    (task_dir / "instruction.md").write_text("make /app/answer.txt say 42")
    (task_dir / "task.toml").write_text("[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 30\n" + toml)
    (task_dir / "tests" / "test.sh").write_text(textwrap.dedent(test_sh))
    (task_dir / "solution" / "solve.sh").write_text(textwrap.dedent(solve))
    task = tackroom.load_task(task_dir)
    manager = tackroom.PluginManager()
    oracle, verifier = manager.get("harness", "oracle"), manager.get("verifier", "test-script")
    trial = Trial(task_id=task.id, task_path=str(task.path), harness="oracle", sandbox="local", verifier="test-script")
    plugins = TrialPlugins(oracle, oracle.Options(), LocalSandboxProvider({"root_dir": str(tmp_path / "roots")}),
                           verifier, verifier.Options())  # fmt: skip
    rt = TrialRuntime(tmp_path / "run", progress=False, manager=manager, retry_backoff_sec=0.01)
    return await rt.run_trial(trial, task, plugins)


# -- the reward channel ---------------------------------------------------------------------


async def test_a_prefilled_and_locked_reward_folder_is_never_read_as_the_reward(tmp_path):
    # The agent writes reward 1 and makes its folder unlistable and unwritable for a root without capabilities:
    # `rm -rf` cannot empty it, `ls -A` sees nothing in it, and test.sh cannot write its own reward there.
    solve = """\
        echo wrong > /app/answer.txt
        mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt
        chmod 444 /logs/verifier/reward.txt && chmod 111 /logs/verifier /logs
        """
    test_sh = """\
        if grep -qx 42 /app/answer.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
        """
    result = await run_task(tmp_path, solve, test_sh)
    assert result.reward == 0.0 and (result.error is None or result.error.error_class == "model"), result


LOCK_REWARD = """\
    mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt
    chmod 444 /logs/verifier/reward.txt && chmod 111 /logs/verifier /logs
    """
"""The agent writes reward 1 and makes its folder unlistable and unwritable for a root without capabilities."""

WRITE_ZERO = ["bash", "-c", "echo 0 > /logs/verifier/reward.txt"]


async def grade(sb, tmp_path: Path, cmd=WRITE_ZERO, **kw):
    dest = tmp_path / f"reward-{len(list(tmp_path.glob('reward-*')))}"
    result = await sb.run_grader(cmd, private=["/tests", "/logs/verifier"], collect="/logs/verifier", dest=dest, **kw)
    return result, dest


async def test_the_grader_writes_into_a_private_reward_folder_whatever_the_agent_left_there(make, tmp_path):
    sb = await make()
    await sb.exec(LOCK_REWARD)
    await sb.kill_processes()
    result, dest = await grade(sb, tmp_path)
    assert result.exit_code == 0, result
    assert (dest / "reward.txt").read_text() == "0\n", "the agent's locked reward file was read as the reward"
    # the sandbox's own folder is as the agent left it: grading never wrote there, and never read it
    assert (sb.root / "logs" / "verifier" / "reward.txt").read_text() == "1\n"
