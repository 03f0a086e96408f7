"""What one run of Claude Code is told: its command line, environment and settings files."""

from __future__ import annotations

import pytest

from tackroom_claude_code import config
from tackroom_claude_code.config import COMPACT_PROMPT, COMPACT_TOOLS, McpServer, RunSettings


def run_settings(**overrides) -> RunSettings:
    values = dict(binary="/opt/claude-code/bin/claude", root="/opt/claude-code", base_url="http://127.0.0.1:4242",
                  model="smollm2", api_key="key", tools=COMPACT_TOOLS, prompt=COMPACT_PROMPT, max_turns=7,
                  max_output_tokens=512)
    return RunSettings(**{**values, **overrides})


def test_the_command_line_is_headless_stream_json_with_the_profiles_tools_and_limits():
    argv = config.argv(run_settings())
    assert argv[:5] == ["/opt/claude-code/bin/claude", "-p", "--output-format", "stream-json", "--verbose"]
    flags = dict(zip(argv, argv[1:], strict=False))
    assert flags["--model"] == "smollm2" and flags["--max-turns"] == "7"
    assert flags["--tools"] == "Bash,Read,Write,Edit" and flags["--system-prompt"] == COMPACT_PROMPT
    # only the harness's settings file: a task's .claude/settings.json cannot add hooks or move the endpoint
    assert flags["--setting-sources"] == "" and flags["--settings"] == "/opt/claude-code/settings.json"
    assert "--dangerously-skip-permissions" in argv and "--strict-mcp-config" in argv and "--mcp-config" not in argv
    assert "--system-prompt" not in config.argv(run_settings(prompt=None))


def test_the_environment_points_every_model_at_the_policy_and_turns_off_what_calls_anthropic():
    env = config.environment(run_settings())
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:4242" and env["ANTHROPIC_API_KEY"] == "key"
    for alias in ("ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL",
                  "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL"):
        assert env[alias] == "smollm2", alias
    for off in ("DISABLE_TELEMETRY", "DISABLE_ERROR_REPORTING", "DISABLE_AUTOUPDATER",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DISABLE_NON_ESSENTIAL_MODEL_CALLS", "DISABLE_AUTO_COMPACT"):
        assert env[off] == "1", off
    assert env["IS_SANDBOX"] == "1" and env["CLAUDE_CONFIG_DIR"] == "/opt/claude-code/config"
    assert env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "512" and env["MAX_THINKING_TOKENS"] == "0"
    assert int(env["BASH_MAX_TIMEOUT_MS"]) == config.BASH_MAX_TIMEOUT_MS
    # the user's env wins, also over what the harness turns off
    assert config.environment(run_settings(extra_env={"DISABLE_TELEMETRY": "0"}))["DISABLE_TELEMETRY"] == "0"
    assert "CLAUDE_CODE_DISABLE_THINKING" not in config.environment(run_settings(thinking_tokens=1024))


def test_mcp_servers_go_to_an_mcp_config_file():
    run = run_settings(mcp_servers={"world": McpServer(url="http://127.0.0.1:9/mcp", headers={"X": "1"}),
                                    "files": McpServer(command=["python", "-m", "srv"], environment={"A": "b"})})
    argv = config.argv(run)
    assert argv[argv.index("--mcp-config") + 1] == "/opt/claude-code/mcp.json"
    assert config.mcp_config(run) == {"mcpServers": {
        "world": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"X": "1"}},
        "files": {"type": "stdio", "command": "python", "args": ["-m", "srv"], "env": {"A": "b"}}}}
    with pytest.raises(ValueError, match="exactly one of `url`"):
        McpServer().claude()


def test_the_seeded_state_skips_onboarding():
    state = config.seeded_state()
    assert state["hasCompletedOnboarding"] is True and state["bypassPermissionsModeAccepted"] is True
    assert config.settings(run_settings())["permissions"] == {"defaultMode": "bypassPermissions"}
