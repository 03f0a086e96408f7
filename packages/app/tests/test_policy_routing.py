"""Core's side of policy routing: which harness goes through a policy gateway, and where the gateway comes from
(the ``tackroom_policy_gateway`` hook; core never imports tackroom-gateway)."""

import os
import subprocess
import sys
import types

import pytest

import tackroom
import tackroom_app
from tackroom_app import Endpoint
from tackroom_app._policy_routing import check_gateway_installed, policy_routing, wants_gateway


class OneChatHarness(tackroom.Harness):
    """A chat-only harness (never run here)."""

    name = "one-chat"
    capabilities = frozenset({"chat", "needs_policy"})


class GatewayPlugin:
    """Says a gateway is installed (never started here)."""

    @tackroom.hookimpl
    def tackroom_policy_gateway(self, base_url, model, api_key, tokenizer):
        raise AssertionError("not started in this test")


def test_wants_gateway_follows_capability_installation_and_override(manager):
    with_gateway = tackroom_app.PluginManager(load_entry_points=False)
    with_gateway.register(GatewayPlugin(), name="gateway")
    policy = Endpoint(base_url="http://x/v1")
    assert wants_gateway(policy, OneChatHarness, with_gateway) is True
    assert wants_gateway(policy, OneChatHarness, manager) is False, "core alone: chat straight to the endpoint"
    assert wants_gateway(policy, tackroom.Harness, with_gateway) is False
    policy.gateway = False
    assert wants_gateway(policy, OneChatHarness, with_gateway) is False
    policy.gateway = True  # exact ids asked for: routed, and an error when nothing provides a gateway
    assert wants_gateway(policy, OneChatHarness, manager) is True


async def test_no_endpoint_or_a_direct_harness_routes_nothing(manager):
    plugins = types.SimpleNamespace(policy_for=None)
    for policy, harness in ((Endpoint(), OneChatHarness), (Endpoint(base_url="http://x/v1"), tackroom.Harness)):
        async with policy_routing(policy, harness, plugins, manager):
            assert plugins.policy_for is None  # no gateway started: trials get the policy as configured


async def test_a_chat_harness_asking_for_the_gateway_without_one_installed_is_a_config_error(manager):
    plugins = types.SimpleNamespace(policy_for=None)
    with pytest.raises(tackroom.ConfigError, match=r"pip install tackroom-gateway \(\./packages/gateway"):
        async with policy_routing(Endpoint(base_url="http://x/v1", gateway=True), OneChatHarness, plugins, manager):
            pass
    assert plugins.policy_for is None
    async with policy_routing(Endpoint(base_url="http://x/v1"), OneChatHarness, plugins, manager):
        assert plugins.policy_for is None  # not asked for: the harness chats with the endpoint itself


def test_a_missing_gateway_is_found_before_anything_starts(manager, tmp_path):
    check_gateway_installed(Endpoint(), OneChatHarness, manager)  # no endpoint: nothing to route
    check_gateway_installed(Endpoint(base_url="http://x/v1"), tackroom.Harness, manager)  # direct harness
    check_gateway_installed(Endpoint(base_url="http://x/v1"), OneChatHarness, manager)  # not asked for
    with pytest.raises(tackroom.ConfigError, match="tackroom-gateway"):
        check_gateway_installed(Endpoint(base_url="http://x/v1", gateway=True), OneChatHarness, manager)
    # `tackroom run` says so before it claims a run folder (no empty run left behind)
    task = tmp_path / "tasks" / "t"
    task.mkdir(parents=True)
    (task / "instruction.md").write_text("Say hi.")
    (task / "task.toml").write_text("")
    config = tmp_path / "run.toml"
    config.write_text('[harness]\nname = "answer"\n[policy]\nbase_url = "http://127.0.0.1:9/v1"\ngateway = true\n')
    env = {**os.environ, "TACKROOM_BLOCK_PLUGINS": "tackroom-gateway"}
    out = subprocess.run([sys.executable, "-m", "tackroom_app._cli.main", "run", str(task), "--config", str(config),
                          "--out", str(tmp_path / "runs")], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2 and "tackroom-gateway" in out.stderr, out.stderr
    assert not (tmp_path / "runs").exists()
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


async def test_tackroom_policy_gateway_from_a_plugin_routes_chat_harnesses(manager):
    calls, events = [], []

    class FakeGateway:
        async def __aenter__(self):
            events.append("started")
            return self

        async def __aexit__(self, *exc):
            events.append("stopped")

        def trial_sessions(self, *, sampling, label):
            return ("sessions", sampling, label)

    class Provider:
        @tackroom.hookimpl
        def tackroom_policy_gateway(self, base_url, model, api_key, tokenizer):
            calls.append((base_url, model, api_key, tokenizer))
            return FakeGateway()

    manager.register(Provider(), name="test:gateway")
    plugins = types.SimpleNamespace(policy_for=None)
    policy = Endpoint(base_url="http://x/v1", model="default", api_key="k", sampling={"temperature": 0.0},
                          label="lbl")
    async with policy_routing(policy, OneChatHarness, plugins, manager):
        assert events == ["started"]
        assert plugins.policy_for == ("sessions", {"temperature": 0.0}, "lbl")
    assert events == ["started", "stopped"]
    assert calls == [("http://x/v1", None, "k", "smollm2")]  # "default": the engine's own model; smollm2 by default


def test_import_tackroom_loads_no_feature_package():
    """Core and the app: importing tackroom, tackroom_app and its CLI pulls in no gateway, web server or tokenizer library."""
    code = ("import sys, tackroom, tackroom.testing, tackroom_app._policy_routing, tackroom_app._cli.main\n"
            "bad = [m for m in sys.modules if m.startswith(('transformers', 'starlette', 'uvicorn', 'tackroom_gateway',"
            " 'tokenizers', 'gguf', 'jinja2', 'tackroom_engine', 'tackroom_matrix'))]\n"
            "assert not bad, bad\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


async def test_routing_direct_with_no_model_named_asks_the_endpoint_what_it_serves(caplog):
    """An engine refuses the placeholder model name ("default"): a chat harness routed straight to the endpoint gets
    the name the endpoint lists, and the run says that no token ids are recorded."""
    from types import SimpleNamespace

    from tackroom import ConfigError
    from tackroom.testing import ScriptedChatServerForTests

    async with ScriptedChatServerForTests(["hi"], model="served-by-the-engine") as server:
        endpoint = Endpoint(base_url=server.base_url, gateway=False)
        plugins = SimpleNamespace(policy=endpoint.policy())
        assert plugins.policy.model == "default"
        with caplog.at_level("WARNING", logger="tackroom"):
            async with policy_routing(endpoint, OneChatHarness, plugins):
                assert plugins.policy.model == "served-by-the-engine"
        assert "no token ids are recorded" in caplog.text
        named = Endpoint(base_url=server.base_url, gateway=False, model="mine")
        plugins = SimpleNamespace(policy=named.policy())
        async with policy_routing(named, OneChatHarness, plugins):
            assert plugins.policy.model == "mine"  # a named model is never second-guessed
    gone = Endpoint(base_url="http://127.0.0.1:9/v1", gateway=False)
    with pytest.raises(ConfigError, match="no model is named and .* did not say what it serves.*--model"):
        async with policy_routing(gone, OneChatHarness, SimpleNamespace(policy=gone.policy())):
            pass
