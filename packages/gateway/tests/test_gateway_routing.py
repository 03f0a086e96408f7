"""Chat-only harnesses are routed through tackroom-gateway's policy gateway (the ``tackroom_policy_gateway`` hook):
one session per attempt, exact tokens recorded. The driver's side of the routing is
packages/app/tests/test_policy_routing.py."""

import json
import types

import httpx
import pytest

import tackroom
import tackroom_app
import tackroom_gateway
from tackroom_app import RunConfig, policy_gateway, run_config
from tackroom_gateway import GatewaySessions, PolicyGateway


class OneChatHarness(tackroom.Harness):
    """Asks the model one question through plain chat completions (a chat-only harness)."""

    name = "one-chat"
    capabilities = frozenset({"chat", "needs_policy"})

    async def run(self, task, sandbox, policy):
        messages = [{"role": "user", "content": task.instruction}]
        async with httpx.AsyncClient(timeout=120) as client:
            r = await client.post(f"{policy.base_url}/chat/completions",
                                  json={"model": policy.model, "messages": messages, "max_tokens": 12, "temperature": 0})
        r.raise_for_status()
        answer = r.json()["choices"][0]["message"]["content"]
        return tackroom.Trajectory(messages=messages + [{"role": "assistant", "content": answer}], final_answer=answer)


@pytest.fixture
def manager_with_one_chat():
    """The process-wide manager (what ``run_config`` resolves names with), with one more harness registered."""
    tackroom_app.reset_plugin_manager()
    manager = tackroom_app.get_plugin_manager()
    mod = types.ModuleType("one_chat_plugin")
    mod.tackroom_harnesses = tackroom.hookimpl(lambda register: register.add_harness(OneChatHarness))
    manager.register(mod)
    yield manager
    tackroom_app.reset_plugin_manager()


def task_dir(tmp_path):
    d = tmp_path / "tasks" / "say-hi"
    (d / "tests").mkdir(parents=True)
    (d / "instruction.md").write_text("Say hi.")
    (d / "task.toml").write_text("[agent]\ntimeout_sec = 300\n")
    (d / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    return d


def test_the_installed_gateway_implements_tackroom_policy_gateway():
    manager = tackroom_app.PluginManager(env={})
    impls = manager.hook.tackroom_policy_gateway.get_hookimpls()
    assert "tackroom-gateway:gateway" in [impl.plugin_name for impl in impls]
    gateway = policy_gateway(base_url="http://127.0.0.1:9/v1", model="default", api_key="k", tokenizer="smollm2",
                             manager=manager)
    assert isinstance(gateway, PolicyGateway)  # not started: routing enters it
    assert gateway.settings.engine.model is None and gateway.settings.engine.api_key == "k"
    assert gateway.settings.tokenizer == "smollm2"
    sessions = gateway.trial_sessions(sampling={"temperature": 0.5}, label="lbl")
    assert isinstance(sessions, GatewaySessions) and sessions.sampling == {"temperature": 0.5}


def test_the_gateway_adds_its_command_through_tackroom_commands():
    import typer

    app = typer.Typer()
    tackroom_gateway.tackroom_commands(app=app)
    assert [c.name for c in app.registered_commands] == ["gateway"]


@pytest.mark.engine
async def test_a_chat_harness_trial_records_exact_tokens(tmp_path, engine_url, manager_with_one_chat):
    cfg = RunConfig.model_validate({
        "tasks": [str(task_dir(tmp_path))], "harness": {"name": "one-chat"},
        "policy": {"base_url": engine_url, "tokenizer": "smollm2"},
        "runtime": {"out": str(tmp_path / "runs")},
    })
    run_dir, results, _ = await run_config(cfg, progress=False, run_id="r")
    assert results[0].error is None and results[0].reward == 1.0
    traj = json.loads((run_dir / results[0].trial_id / "trajectory.json").read_text())
    assert len(traj["turns"]) == 1
    turn = traj["turns"][0]
    assert traj["token_ids"] == turn["prompt_ids"] + turn["completion_ids"]
    assert traj["loss_mask"] == [0] * len(turn["prompt_ids"]) + [1] * len(turn["completion_ids"])
    assert traj["messages"][-1]["role"] == "assistant"


async def test_an_unreachable_engine_is_a_clear_error(tmp_path, manager_with_one_chat):
    cfg = RunConfig.model_validate({
        "tasks": [str(task_dir(tmp_path))], "harness": {"name": "one-chat"},
        "policy": {"base_url": "http://127.0.0.1:9/v1", "tokenizer": "smollm2"},
        "runtime": {"out": str(tmp_path / "runs")},
    })
    with pytest.raises(tackroom.InfraError, match="127.0.0.1:9"):
        await run_config(cfg, progress=False)
