"""Core's side of policy routing: which harness goes through a policy gateway, and where the gateway comes from
(the ``tackroom_policy_gateway`` hook; core never imports tackroom-gateway)."""

import os
import subprocess
import sys
import types

import pytest

import tackroom
from tackroom._endpoint import Endpoint
from tackroom._policy_routing import check_gateway_installed, policy_routing, wants_gateway


class OneChatHarness(tackroom.Harness):
    """A chat-only harness (never run here)."""

    name = "one-chat"
    capabilities = frozenset({"chat", "needs_policy"})


def test_wants_gateway_follows_capability_and_override():
    policy = Endpoint(base_url="http://x/v1")
    assert wants_gateway(policy, OneChatHarness) is True
    assert wants_gateway(policy, tackroom.Harness) is False
    policy.gateway = False
    assert wants_gateway(policy, OneChatHarness) is False


async def test_no_endpoint_or_a_direct_harness_routes_nothing(manager):
    plugins = types.SimpleNamespace(policy_for=None)
    for policy, harness in ((Endpoint(), OneChatHarness), (Endpoint(base_url="http://x/v1"), tackroom.Harness)):
        async with policy_routing(policy, harness, plugins, manager):
            assert plugins.policy_for is None  # no gateway started: trials get the policy as configured


async def test_a_chat_harness_without_any_tackroom_policy_gateway_is_a_config_error(manager):
    plugins = types.SimpleNamespace(policy_for=None)
    with pytest.raises(tackroom.ConfigError, match=r"pip install tackroom-gateway \(\./packages/gateway"):
        async with policy_routing(Endpoint(base_url="http://x/v1"), OneChatHarness, plugins, manager):
            pass
    assert plugins.policy_for is None


def test_a_missing_gateway_is_found_before_anything_starts(manager, tmp_path):
    check_gateway_installed(Endpoint(), OneChatHarness, manager)  # no endpoint: nothing to route
    check_gateway_installed(Endpoint(base_url="http://x/v1"), tackroom.Harness, manager)  # direct harness
    with pytest.raises(tackroom.ConfigError, match="tackroom-gateway"):
        check_gateway_installed(Endpoint(base_url="http://x/v1"), OneChatHarness, manager)
    # `tackroom run` says so before it claims a run folder (no empty run left behind)
    task = tmp_path / "tasks" / "t"
    task.mkdir(parents=True)
    (task / "instruction.md").write_text("Say hi.")
    (task / "task.toml").write_text("")
    env = {**os.environ, "TACKROOM_BLOCK_PLUGINS": "tackroom-gateway"}
    out = subprocess.run([sys.executable, "-m", "tackroom._cli.main", "run", str(task), "--harness", "answer",
                          "--base-url", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "runs")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2 and "tackroom-gateway" in out.stderr, out.stderr
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
    """Core alone: importing tackroom (and its CLI) pulls in no gateway, web server or tokenizer library."""
    code = ("import sys, tackroom, tackroom.testing, tackroom._policy_routing, tackroom._cli.main\n"
            "bad = [m for m in sys.modules if m.startswith(('transformers', 'starlette', 'uvicorn', 'tackroom_gateway',"
            " 'tokenizers', 'gguf', 'jinja2', 'tackroom_engine', 'tackroom_matrix'))]\n"
            "assert not bad, bad\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
