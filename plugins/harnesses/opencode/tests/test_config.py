"""The opencode.json the harness writes, and its options."""

from __future__ import annotations

import pytest

from tackroom import ConfigError
from tackroom.testing import check_plugin, check_registered
from tackroom_app import PluginSelection, instantiate
from tackroom_opencode.config import COMPACT_TOOLS, AgentSettings, McpServer, ModelSettings, build_config, permissions
from tackroom_opencode.harness import OpenCodeHarness

MODEL = ModelSettings(base_url="http://127.0.0.1:9000/sessions/t1/v1", model="smollm2", context_length=4096,
                      max_output_tokens=512, temperature=0.7, extra_body={"seed": 7})


def test_the_plugin_is_registered_and_well_formed():
    check_plugin(OpenCodeHarness)
    check_registered("harness", "opencode", distribution="tackroom-opencode")
    assert {"chat", "needs_policy", "agent_in_sandbox"} <= OpenCodeHarness.capabilities


def test_one_provider_pointing_at_the_session_nothing_interactive_no_compaction():
    doc = build_config(MODEL, AgentSettings(tools=COMPACT_TOOLS, prompt="be brief", max_steps=7))
    assert doc["model"] == doc["small_model"] == "tackroom/smollm2"
    (provider,) = doc["provider"].values()
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"]["baseURL"] == MODEL.base_url
    entry = provider["models"]["smollm2"]
    assert entry["limit"] == {"context": 4096, "output": 512} and entry["options"] == {"seed": 7}
    assert doc["compaction"] == {"auto": False, "prune": False}
    assert doc["agent"]["build"] == {"prompt": "be brief", "steps": 7, "temperature": 0.7}
    assert doc["mcp"] == {} and doc["share"] == "disabled" and doc["autoupdate"] is False
    perms = doc["permission"]
    assert perms["*"] == "deny" and "ask" not in perms.values()
    assert perms["bash"] == perms["read"] == perms["edit"] == "allow"
    assert "task" not in perms and "question" not in perms and "webfetch" not in perms


def test_write_and_edit_share_opencodes_edit_permission():
    assert permissions(["write"]) == {"*": "deny", "edit": "allow", "external_directory": "allow", "doom_loop": "allow"}


def test_mcp_servers_remote_and_local():
    doc = build_config(MODEL, AgentSettings(tools=("bash",), mcp_servers={
        "world": McpServer(url="http://127.0.0.1:8800/mcp"),
        "files": McpServer(command=["python3", "-m", "files_server"], environment={"ROOT": "/app"}),
    }))
    assert doc["mcp"]["world"] == {"type": "remote", "url": "http://127.0.0.1:8800/mcp", "enabled": True}
    assert doc["mcp"]["files"]["command"] == ["python3", "-m", "files_server"]
    with pytest.raises(ValueError, match="exactly one of `url`"):
        McpServer().opencode()


def test_options_are_validated_with_the_dotted_path():
    harness = instantiate("harness", PluginSelection(name="opencode", profile="compact", max_turns=3))
    assert harness.options.profile == "compact" and harness.options.max_turns == 3
    with pytest.raises(ConfigError, match="harness.profile"):
        instantiate("harness", PluginSelection(name="opencode", profile="tiny"))
    with pytest.raises(ConfigError, match="harness.max_turn"):
        instantiate("harness", PluginSelection(name="opencode", max_turn=3))
