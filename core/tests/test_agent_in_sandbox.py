"""Harnesses whose agent runs inside the sandbox (capability ``agent_in_sandbox``) reach the host through one
forwarded port (their policy), never through the host's network."""

import asyncio

import tackroom
import tackroom.testing
from tackroom._attempt import sandbox_spec
from tackroom._builtins.test_script_verifier import TestScriptVerifier
from tackroom._manager import PluginManager
from tackroom._runtime import TrialPlugins, TrialRuntime
from tackroom._trial import Trial
from tackroom_local import LocalSandboxProvider


class DialsHomeHarness(tackroom.Harness):
    """Inside the sandbox: calls the forwarded policy port, then tries what a hostile agent would: another host
    port (the engine's), the host port by its own number, and any interface but loopback."""

    name = "dials-home"
    capabilities = frozenset({"agent_in_sandbox"})
    policy_port = 0
    engine_port = 0

    async def run(self, task, sandbox, policy):
        url = await sandbox.forward_host_port(self.policy_port)
        inner = url.rsplit(":", 1)[1]

        async def dial(port) -> str:
            r = await sandbox.exec(f"timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && head -c 20 <&3'", timeout=30)
            return r.stdout.strip() if r.ok else "refused"

        nets = (await sandbox.exec("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", timeout=30)).stdout.split()
        answers = {"policy": await dial(inner), "engine": await dial(self.engine_port), "nets": ",".join(nets)}
        if inner != str(self.policy_port):
            answers["policy_by_host_number"] = await dial(self.policy_port)
        return tackroom.Trajectory(final_answer=repr(answers))


def write_task(root, allow_internet: bool) -> tackroom.Task:
    return tackroom.load_task(tackroom.testing.write_task(
        root, "t", instruction="call home", test_sh="echo 1 > /logs/verifier/reward.txt\n",
        toml=f"[agent]\ntimeout_sec = 30\n[environment]\nallow_internet = {str(allow_internet).lower()}\n"))


def test_the_capability_grants_no_network(tmp_path):
    task = write_task(tmp_path, allow_internet=False)
    assert sandbox_spec(task, "a").allow_internet is False


async def test_an_in_sandbox_agent_reaches_its_policy_port_and_nothing_else_of_the_host(tmp_path):
    async def serve(what: bytes):
        async def answer(reader, writer):
            writer.write(what)
            await writer.drain()
            writer.close()

        return await asyncio.start_server(answer, "127.0.0.1", 0)

    policy, engine = await serve(b"policy\n"), await serve(b"engine\n")
    DialsHomeHarness.policy_port = policy.sockets[0].getsockname()[1]
    DialsHomeHarness.engine_port = engine.sockets[0].getsockname()[1]
    task = write_task(tmp_path, allow_internet=False)
    plugins = TrialPlugins(DialsHomeHarness, DialsHomeHarness.Options(), LocalSandboxProvider(),
                           TestScriptVerifier, TestScriptVerifier.Options())
    trial = Trial(task_id=task.id, task_path=str(task.path), harness="dials-home", sandbox="local", verifier="test-script")
    runtime = TrialRuntime(tmp_path / "run", progress=False, manager=PluginManager())
    try:
        result, trajectory = await runtime.run_attempt(trial, task, plugins, 1)
    finally:
        policy.close()
        engine.close()
    assert result.error is None, result.error
    answers = eval(trajectory.final_answer)
    assert answers["policy"] == "policy", answers
    assert answers["engine"] == "refused" and answers["nets"] == "lo", answers
    assert answers.get("policy_by_host_number", "refused") == "refused", answers
    assert not any("network access" in n for n in result.notes)
