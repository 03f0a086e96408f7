"""Harnesses whose agent runs inside the sandbox (capability ``agent_in_sandbox``) get a sandbox that reaches the host."""

import asyncio

import tackroom
from tackroom.builtins.local_sandbox import LocalSandboxProvider
from tackroom.builtins.test_script_verifier import TestScriptVerifier
from tackroom.runtime import TrialPlugins, TrialRuntime, sandbox_spec
from tackroom.trial import Trial


class DialsHomeHarness(tackroom.Harness):
    """Connects from inside the sandbox to a port on the host's loopback, as an in-sandbox agent calls its policy."""

    name = "dials-home"
    capabilities = frozenset({"agent_in_sandbox"})
    port = 0

    async def run(self, instruction, sandbox, policy):
        probe = await sandbox.exec(f"timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{self.port}' && echo reached", timeout=30)
        return tackroom.Trajectory(final_answer=probe.stdout.strip() or probe.stderr.strip())


def write_task(root, allow_internet: bool) -> tackroom.Task:
    d = root / "t"
    (d / "tests").mkdir(parents=True)
    (d / "instruction.md").write_text("call home")
    (d / "task.toml").write_text(f"[agent]\ntimeout_sec = 30\n[environment]\nallow_internet = {str(allow_internet).lower()}\n")
    (d / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    return tackroom.load_task(d)


def test_the_capability_grants_the_network_and_nothing_else_does(tmp_path):
    task = write_task(tmp_path, allow_internet=False)
    assert sandbox_spec(task, "a").allow_internet is False
    assert sandbox_spec(task, "a", tackroom.Harness).allow_internet is False
    assert sandbox_spec(task, "a", DialsHomeHarness).allow_internet is True


async def test_an_in_sandbox_agent_reaches_the_host_and_the_trial_says_so(tmp_path):
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    DialsHomeHarness.port = server.sockets[0].getsockname()[1]
    task = write_task(tmp_path, allow_internet=False)
    plugins = TrialPlugins(DialsHomeHarness, DialsHomeHarness.Options(), LocalSandboxProvider(),
                           TestScriptVerifier, TestScriptVerifier.Options())
    trial = Trial(task_id=task.id, task_path=str(task.path), harness="dials-home", sandbox="local", verifier="test-script")
    runtime = TrialRuntime(tmp_path / "run", progress=False, manager=tackroom.PluginManager())
    try:
        result, trajectory = await runtime.run_attempt(trial, task, plugins, 1)
    finally:
        server.close()
    assert result.error is None and trajectory.final_answer == "reached"
    assert any("runs its agent inside the sandbox" in n for n in result.notes)
