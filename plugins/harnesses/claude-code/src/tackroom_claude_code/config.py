"""How one trial runs Claude Code: its command line, its environment and the settings files it reads.

What the harness pins, and why:

* the model: ``ANTHROPIC_BASE_URL`` is the trial's relay (its root: Claude Code appends ``/v1/messages``), every
  model alias Claude Code knows (sonnet, opus, haiku, the small/fast model, sub-agents) names the policy's model, so
  no call can go anywhere else or ask for a model the gateway does not serve;
* nothing calls Anthropic: telemetry, error reporting, auto-updates, feature flags and non-essential traffic off
  (the machine has no route there; a call that waits on one is a hang);
* the conversation is the one the tokens were sampled in: no auto-compaction (a summary rewrites it), no extended
  thinking unless asked, no experimental betas or prompt-cache markers (plain Messages requests);
* the harness's settings only: ``--setting-sources ""`` ignores user, project and local settings files (a task's
  ``.claude/settings.json`` cannot add hooks or change the endpoint), ``--settings`` gives ours, and
  ``CLAUDE_CONFIG_DIR`` keeps Claude Code's state under the harness's directory, with onboarding already done;
  the task's ``CLAUDE.md`` files and auto-memory are off too, so every harness gets the same instruction;
* permissions: ``--dangerously-skip-permissions`` (nobody is there to answer a prompt; the sandbox is the
  boundary), with ``IS_SANDBOX=1``, Claude Code's own switch that allows it as root inside a sandbox;
* tools: ``--tools`` names the built-in tools offered; MCP servers only from ``--mcp-config`` (``--strict-mcp-config``).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

FULL_TOOLS = ("Bash", "Read", "Write", "Edit", "Glob", "Grep")
"""Claude Code's file and shell tools: its defaults without web access, sub-agents, skills, crons or worktrees."""

COMPACT_TOOLS = ("Bash", "Read", "Write", "Edit")
"""The smallest useful set (~1k tokens of tool definitions)."""

COMPACT_PROMPT = (
    "You are Claude Code, a coding agent working in a terminal sandbox. Complete the user's task by calling the "
    "tools: run shell commands with Bash, and Read, Write or Edit files (absolute paths). Work in the current "
    "directory unless the task names other paths. When the task is done, reply with a one-line summary and stop."
)
"""The system prompt of the ``compact`` profile (Claude Code's own is ~2k tokens, its tools' ~8k)."""

DISABLED_ENV = {
    # Nothing reaches Anthropic's servers (there is no route to them here: a call that waits is a hang).
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_UPDATES": "1",
    "DISABLE_GROWTHBOOK": "1",
    "CLAUDE_CODE_DISABLE_FEATURE_FLAGS": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    # Model calls beyond the conversation (titles, summaries, tips) would be turns of their own in the session.
    "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",
    "DISABLE_COST_WARNINGS": "1",
    # The conversation stays the one the tokens were sampled in.
    "DISABLE_AUTO_COMPACT": "1",
    "DISABLE_COMPACT": "1",
    # Plain Messages requests: no beta features, no cache_control markers.
    "CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS": "1",
    "DISABLE_PROMPT_CACHING": "1",
    "DISABLE_INTERLEAVED_THINKING": "1",
    # The task's instruction is the prompt: no CLAUDE.md, auto-memory or prompt history from earlier sessions.
    "CLAUDE_CODE_DISABLE_CLAUDE_MDS": "1",
    "CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1",
    "CLAUDE_CODE_SKIP_PROMPT_HISTORY": "1",
    "CLAUDE_CODE_DISABLE_FILE_CHECKPOINTING": "1",
    # Background shells would outlive the turn that started them; the agent runs commands in the foreground.
    "CLAUDE_CODE_DISABLE_BACKGROUND_TASKS": "1",
    # Root inside a sandbox may skip permission prompts (Claude Code refuses --dangerously-skip-permissions as
    # root otherwise).
    "IS_SANDBOX": "1",
}

BASH_DEFAULT_TIMEOUT_MS = 120_000
BASH_MAX_TIMEOUT_MS = 600_000
"""Claude Code's Bash tool stops a command after at most this long: the harness's hang timeout must exceed it."""


class McpServer(BaseModel):
    """An MCP server Claude Code may use: ``url`` (streamable HTTP, e.g. a world's endpoint) or ``command`` (stdio)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    command: list[str] | None = None
    environment: dict[str, str] = Field(default_factory=dict)

    def claude(self) -> dict[str, Any]:
        """The server's entry in ``--mcp-config``'s ``mcpServers``."""
        if (self.url is None) == (self.command is None):
            raise ValueError("an MCP server needs exactly one of `url` (remote) or `command` (local)")
        if self.url is not None:
            out: dict[str, Any] = {"type": "http", "url": self.url}
            if self.headers:
                out["headers"] = dict(self.headers)
            return out
        command = list(self.command or [])
        if not command:
            raise ValueError("an MCP server's `command` needs at least the program to run")
        out = {"type": "stdio", "command": command[0], "args": command[1:]}
        if self.environment:
            out["env"] = dict(self.environment)
        return out


class RunSettings(BaseModel):
    """Everything one run of Claude Code is told."""

    binary: str
    root: str
    """The harness's directory in the sandbox (Claude Code's config dir and the run's files live under it)."""
    base_url: str
    """The relay's root as the sandbox sees it (``http://127.0.0.1:PORT``, no ``/v1``)."""
    model: str
    api_key: str
    tools: tuple[str, ...]
    prompt: str | None = None
    """None keeps Claude Code's own system prompt."""
    append_prompt: str | None = None
    max_turns: int | None = None
    max_output_tokens: int
    thinking_tokens: int = 0
    mcp_servers: dict[str, McpServer] = Field(default_factory=dict)
    extra_env: dict[str, str] = Field(default_factory=dict)

    @property
    def config_dir(self) -> str:
        return f"{self.root}/config"

    @property
    def settings_path(self) -> str:
        return f"{self.root}/settings.json"

    @property
    def mcp_path(self) -> str:
        return f"{self.root}/mcp.json"


def argv(run: RunSettings) -> list[str]:
    """The command line: headless, stream-json events on stdout, the instruction on stdin."""
    out = [run.binary, "-p", "--output-format", "stream-json", "--verbose",
           "--model", run.model,
           "--dangerously-skip-permissions",
           "--setting-sources", "", "--settings", run.settings_path,
           # Skills and slash commands are prompt text and a tool of their own; none are wanted here.
           "--disable-slash-commands",
           "--strict-mcp-config",
           "--tools", ",".join(run.tools)]
    if run.max_turns is not None:
        out += ["--max-turns", str(run.max_turns)]
    if run.mcp_servers:
        out += ["--mcp-config", run.mcp_path]
    if run.prompt is not None:
        out += ["--system-prompt", run.prompt]
    if run.append_prompt:
        out += ["--append-system-prompt", run.append_prompt]
    return out


def environment(run: RunSettings) -> dict[str, str]:
    """Claude Code's environment (on top of the sandbox's); ``extra_env`` wins."""
    env = {
        "ANTHROPIC_BASE_URL": run.base_url,
        "ANTHROPIC_API_KEY": run.api_key,
        "ANTHROPIC_MODEL": run.model,
        # Every alias names the policy: no call may ask for a model the gateway does not serve.
        "ANTHROPIC_SMALL_FAST_MODEL": run.model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": run.model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": run.model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": run.model,
        "CLAUDE_CODE_SUBAGENT_MODEL": run.model,
        "CLAUDE_CONFIG_DIR": run.config_dir,
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(run.max_output_tokens),
        "MAX_THINKING_TOKENS": str(run.thinking_tokens),
        "BASH_DEFAULT_TIMEOUT_MS": str(BASH_DEFAULT_TIMEOUT_MS),
        "BASH_MAX_TIMEOUT_MS": str(BASH_MAX_TIMEOUT_MS),
        **DISABLED_ENV,
    }
    if run.thinking_tokens == 0:
        env["CLAUDE_CODE_DISABLE_THINKING"] = "1"
    env.update(run.extra_env)
    return env


def settings(run: RunSettings) -> dict[str, Any]:
    """``settings.json`` (given with ``--settings``; no other settings file is read)."""
    return {
        "permissions": {"defaultMode": "bypassPermissions"},
        "autoUpdates": False,
        "includeCoAuthoredBy": False,
        "cleanupPeriodDays": 1,
        "env": {},
    }


def seeded_state() -> dict[str, Any]:
    """``.claude.json`` in the config dir: first start, onboarding and the permissions warning already behind it."""
    return {
        "hasCompletedOnboarding": True,
        "bypassPermissionsModeAccepted": True,
        "autoUpdates": False,
        "numStartups": 1,
    }


def mcp_config(run: RunSettings) -> dict[str, Any]:
    """``--mcp-config``'s document."""
    return {"mcpServers": {name: server.claude() for name, server in run.mcp_servers.items()}}


def dump(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
