"""``opencode.json`` for one trial: one OpenAI-compatible provider (the trial's policy), nothing interactive.

What the file pins, and why:

* one provider, ``@ai-sdk/openai-compatible`` (bundled in the OpenCode binary,
  so nothing is installed at run time), whose ``baseURL`` is the trial's policy
  (a gateway session), with the model's context and output limits;
* ``compaction.auto = false`` and ``prune = false``: summarising or dropping
  old turns rewrites the conversation, which breaks on-policy token accounting;
* ``permission``: ``"*": "deny"`` removes every tool not chosen (OpenCode drops
  denied tools from the request), the chosen ones are ``allow`` (never ``ask``:
  nobody is there to answer), so no question tool and no sub-agents (``task``);
* no MCP servers unless given; no sharing, no auto-update.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

PROVIDER_ID = "tackroom"

FULL_TOOLS = ("bash", "read", "write", "edit", "glob", "grep", "todowrite")
"""OpenCode's file and shell tools (its defaults without web, skills, sub-agents and questions)."""

COMPACT_TOOLS = ("bash", "read", "write", "edit")
"""The smallest useful set: its tool descriptions alone are ~2.5k tokens."""

COMPACT_PROMPT = (
    "You are opencode, a coding agent working in a terminal sandbox. Complete the user's task by calling "
    "the tools: run shell commands with bash, and read, write or edit files. Work in the current directory "
    "unless the task names other paths. When the task is done, reply with a one-line summary and stop."
)
"""The system prompt of the ``compact`` profile (OpenCode's own is ~2.5k tokens)."""

# OpenCode checks permissions per permission key; write/edit/patch share "edit".
_PERMISSION_KEY = {"write": "edit", "edit": "edit", "patch": "edit", "multiedit": "edit"}


class McpServer(BaseModel):
    """An MCP server OpenCode may use: ``url`` (remote, e.g. a world's endpoint) or ``command`` (local)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    command: list[str] | None = None
    environment: dict[str, str] = Field(default_factory=dict)

    def opencode(self) -> dict[str, Any]:
        if (self.url is None) == (self.command is None):
            raise ValueError("an MCP server needs exactly one of `url` (remote) or `command` (local)")
        if self.url is not None:
            out: dict[str, Any] = {"type": "remote", "url": self.url, "enabled": True}
            if self.headers:
                out["headers"] = dict(self.headers)
            return out
        out = {"type": "local", "command": list(self.command or []), "enabled": True}
        if self.environment:
            out["environment"] = dict(self.environment)
        return out


class ModelSettings(BaseModel):
    """What the provider entry says about the policy's model."""

    base_url: str
    model: str
    api_key: str = "EMPTY"
    context_length: int
    max_output_tokens: int
    temperature: float | None = None
    top_p: float | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Other sampling fields (seed, top_k, …): OpenCode sends them in every request body."""


class AgentSettings(BaseModel):
    """The ``build`` agent OpenCode runs headless."""

    tools: tuple[str, ...]
    prompt: str | None = None
    """None keeps OpenCode's own system prompt."""
    max_steps: int | None = None
    mcp_servers: dict[str, McpServer] = Field(default_factory=dict)


Profile = Literal["full", "compact"]


def permissions(tools: tuple[str, ...] | list[str]) -> dict[str, str]:
    """Deny everything, then allow the chosen tools (and paths outside the working directory)."""
    rules = {"*": "deny"}
    for tool in tools:
        rules[_PERMISSION_KEY.get(tool, tool)] = "allow"
    # The sandbox is the boundary: files outside the working directory (/tmp, /logs …) are fair game,
    # and a repeated call is not a question for a user who is not there.
    rules["external_directory"] = "allow"
    rules["doom_loop"] = "allow"
    return rules


def build_config(model: ModelSettings, agent: AgentSettings) -> dict[str, Any]:
    """The ``opencode.json`` document."""
    model_entry: dict[str, Any] = {
        "name": model.model,
        "tool_call": True,
        "temperature": model.temperature is not None,
        "limit": {"context": model.context_length, "output": model.max_output_tokens},
    }
    if model.extra_body:
        model_entry["options"] = dict(model.extra_body)
    build: dict[str, Any] = {}
    if agent.prompt is not None:
        build["prompt"] = agent.prompt
    if agent.max_steps is not None:
        build["steps"] = agent.max_steps
    if model.temperature is not None:
        build["temperature"] = model.temperature
    if model.top_p is not None:
        build["top_p"] = model.top_p
    qualified = f"{PROVIDER_ID}/{model.model}"
    return {
        "$schema": "https://opencode.ai/config.json",
        "model": qualified,
        "small_model": qualified,
        "autoupdate": False,
        "share": "disabled",
        "provider": {
            PROVIDER_ID: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "tackroom policy",
                "options": {"baseURL": model.base_url, "apiKey": model.api_key},
                "models": {model.model: model_entry},
            }
        },
        "compaction": {"auto": False, "prune": False},
        "agent": {"build": build} if build else {},
        "permission": permissions(agent.tools),
        "mcp": {name: server.opencode() for name, server in agent.mcp_servers.items()},
    }
