"""``config.toml`` (and, for the compact profile, a model catalog) for one Codex trial.

What the files pin, and why (codex-rs 0.171.0; ``codex exec --strict-config`` refuses any key it does not know, so
a key that drifts away in a new release fails loudly at start-up, never silently):

* one model provider, ``tackroom``, whose ``base_url`` is the trial's relay (``.../v1``) with ``wire_api =
  "responses"`` and the key read from an environment variable (never written to disk); Codex retries are few, the
  relay counts the failures and the harness decides when the endpoint is down;
* only ``function`` tools reach the policy: ``exec_command`` and ``write_stdin`` (Codex's unified exec; 0.171.0
  offers no other shell tool to a model it does not know). ``apply_patch`` exists only as a freeform ``custom`` tool
  in this release (``apply_patch_tool_type`` accepts ``freeform`` alone), so it is left out (the catalog entry's
  ``apply_patch_tool_type`` is null, and the stock metadata has none); the agent edits files through the shell.
  Web search, sub-agents (a ``namespace`` tool), goals, ``request_user_input``, ``view_image`` (the engine reads
  text), skills, plugins, apps and image generation are off;
* ``sandbox_mode = "danger-full-access"`` and ``approval_policy = "never"``: the tackroom sandbox is the boundary
  (Codex's own Landlock/bubblewrap sandbox cannot nest inside ours) and nobody is there to approve;
* no reasoning parameters (``model_reasoning_effort`` unset, no summaries): the request's ``reasoning`` stays
  ``{}``, which the gateway accepts and ignores;
* auto-compaction pushed past the context: a summarised conversation is not the one the tokens were sampled in, so
  an episode that outgrows the context ends there (``context_exhausted``);
* no update check, analytics, feedback or history; no MCP servers unless given; commands run in a plain (non-login)
  shell so the image's ``PATH`` holds.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

PROVIDER_ID = "tackroom"
API_KEY_ENV = "TACKROOM_CODEX_API_KEY"
"""The provider's key variable. Codex's default shell environment policy drops ``*KEY*`` variables, so the
agent's commands never see it."""

NO_COMPACTION = 1 << 40
"""An auto-compaction threshold no context reaches: Codex never rewrites the conversation."""

COMPACT_PROMPT = (
    "You are Codex, a coding agent working in a terminal sandbox. Complete the user's task by running shell "
    "commands with the exec_command tool (its `cmd` is one bash command line); create and edit files with shell "
    "commands too. Work in the current directory unless the task names other paths. When the task is done, reply "
    "with a one-line summary and stop."
)
"""The system prompt of the ``compact`` profile (Codex's own is ~4k tokens)."""

DISABLED_FEATURES = (
    "goals",  # get_goal/create_goal/update_goal tools and their state
    "view_image",  # the engine behind the gateway reads text only
    "image_generation",
    "apps",
    "plugins",
    "remote_plugin",
    "tool_suggest",
    "browser_use",
    "computer_use",
    "hooks",  # nothing from the task's files runs as Codex's hooks
    "memories",
    "shell_snapshot",  # a login-shell snapshot per session: nothing the trial needs
    "unbounded_connection_retries",  # else Codex waits forever "for network" when the relay's port is gone
)
"""Codex features (``[features]``) switched off: tools the engine cannot serve or the trial must not have."""

Profile = Literal["full", "compact"]


class McpServer(BaseModel):
    """An MCP server Codex may use: ``url`` (streamable HTTP, e.g. a world's endpoint) or ``command`` (stdio)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    command: list[str] | None = None
    environment: dict[str, str] = Field(default_factory=dict)

    def codex(self) -> dict[str, Any]:
        """The ``[mcp_servers.NAME]`` table."""
        if (self.url is None) == (not self.command):
            raise ValueError("an MCP server needs exactly one of `url` (streamable HTTP) or `command` (stdio)")
        if self.url is not None:
            out: dict[str, Any] = {"url": self.url}
            if self.headers:
                out["http_headers"] = dict(self.headers)
            return out
        command = list(self.command or [])
        out = {"command": command[0], "args": command[1:]}
        if self.environment:
            out["env"] = dict(self.environment)
        return out


class CodexSettings(BaseModel):
    """Everything one trial's Codex config says."""

    base_url: str
    """The relay's OpenAI base URL as seen from inside the sandbox (``.../v1``)."""
    model: str
    context_length: int
    profile: Profile
    prompt: str | None = None
    """None keeps Codex's own system prompt (only with the ``full`` profile: the catalog entry needs one)."""
    catalog_path: str | None = None
    """Where the model catalog lies in the sandbox (compact profile, or a custom prompt)."""
    mcp_servers: dict[str, McpServer] = Field(default_factory=dict)
    retries: int = 1
    """Codex's own retries of a failed request or stream (the relay counts the failures)."""
    stream_idle_timeout_ms: int = 900_000
    """A slow CPU engine may think for minutes before its first token; the harness's hang watch decides."""


def uses_catalog(settings: CodexSettings) -> bool:
    return settings.prompt is not None


def build_config(settings: CodexSettings) -> dict[str, Any]:
    """The ``config.toml`` document."""
    doc: dict[str, Any] = {
        "model": settings.model,
        "model_provider": PROVIDER_ID,
        "model_context_window": settings.context_length,
        "model_auto_compact_token_limit": NO_COMPACTION,
        "approval_policy": "never",
        "sandbox_mode": "danger-full-access",
        "allow_login_shell": False,
        "web_search": "disabled",
        "check_for_update_on_startup": False,
        "include_permissions_instructions": False,
        "hide_agent_reasoning": False,
        "show_raw_agent_reasoning": True,
        "model_reasoning_summary": "none",
    }
    if settings.profile == "compact":
        doc["project_doc_max_bytes"] = 0  # an AGENTS.md in the task would not fit a small context
    if uses_catalog(settings):
        if settings.catalog_path is None:
            raise ValueError("a custom system prompt goes into a model catalog: set catalog_path")
        doc["model_catalog_json"] = settings.catalog_path
    doc["model_providers"] = {PROVIDER_ID: {
        "name": "tackroom policy",
        "base_url": settings.base_url,
        "env_key": API_KEY_ENV,
        "wire_api": "responses",
        "request_max_retries": settings.retries,
        "stream_max_retries": settings.retries,
        "stream_idle_timeout_ms": settings.stream_idle_timeout_ms,
    }}
    doc["features"] = dict.fromkeys(DISABLED_FEATURES, False)
    doc["agents"] = {"enabled": False}  # sub-agents: a `namespace` tool (~3k tokens); one agent per trial
    doc["tools"] = {"experimental_request_user_input": {"enabled": False}}
    doc["skills"] = {"include_instructions": False, "bundled": {"enabled": False}}
    doc["history"] = {"persistence": "none"}
    doc["analytics"] = {"enabled": False}
    doc["feedback"] = {"enabled": False}
    doc["shell_environment_policy"] = {"inherit": "all"}
    doc["mcp_servers"] = {name: server.codex() for name, server in settings.mcp_servers.items()}
    return doc


def build_catalog(settings: CodexSettings) -> dict[str, Any]:
    """A one-model catalog (``model_catalog_json``): how Codex 0.171.0 takes a system prompt and tool choices for a
    model it does not know. Without it Codex uses its fallback metadata (its own prompt, the same tools)."""
    if settings.prompt is None:
        raise ValueError("the catalog carries the system prompt; none was given")
    return {"models": [{
        "slug": settings.model,
        "display_name": settings.model,
        "description": "the tackroom policy",
        "default_reasoning_level": None,
        "supported_reasoning_levels": [],
        "shell_type": "unified_exec",
        "visibility": "list",
        "supported_in_api": True,
        "priority": 1,
        "additional_speed_tiers": [],
        "service_tiers": [],
        "availability_nux": None,
        "upgrade": None,
        "base_instructions": settings.prompt,
        "model_messages": None,
        "include_skills_usage_instructions": False,
        "include_plugin_usage_instructions": False,
        "include_apps_usage_instructions": False,
        "default_reasoning_summary": "none",
        "support_verbosity": False,
        "default_verbosity": None,
        "apply_patch_tool_type": None,  # freeform (a `custom` tool) is the only kind 0.171.0 knows
        "web_search_tool_type": "text",
        "truncation_policy": {"mode": "bytes", "limit": 10_000},
        "supports_image_detail_original": False,
        "context_window": settings.context_length,
        "max_context_window": settings.context_length,
        "auto_compact_token_limit": NO_COMPACTION,
        "effective_context_window_percent": 95,
        "experimental_supported_tools": [],
        "input_modalities": ["text"],
        "supports_search_tool": False,
        "supports_experimental_context": False,
        "use_responses_lite": False,
        "supports_reasoning_effort_updates": False,
        "node_repl_auto_review_required": False,
        "node_repl_disabled": True,
    }]}


def catalog_json(settings: CodexSettings) -> str:
    return json.dumps(build_catalog(settings), indent=2, ensure_ascii=False) + "\n"


# -- TOML --------------------------------------------------------------------------------------------------------
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        # A JSON string is a TOML basic string (same escapes; json.dumps writes no `\/`).
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML form for {type(value).__name__}: {value!r}")


def to_toml(doc: dict[str, Any]) -> str:
    """A TOML document: scalars and arrays first, then one ``[table]`` per nested dict (dotted headers)."""
    lines: list[str] = []

    def table(prefix: list[str], data: dict[str, Any]) -> None:
        scalars = {k: v for k, v in data.items() if not isinstance(v, dict)}
        tables = {k: v for k, v in data.items() if isinstance(v, dict)}
        if prefix and (scalars or not tables):
            lines.append("")
            lines.append("[" + ".".join(_key(p) for p in prefix) + "]")
        lines.extend(f"{_key(k)} = {_value(v)}" for k, v in scalars.items())
        for k, v in tables.items():
            table([*prefix, k], v)

    table([], doc)
    return "\n".join(lines).lstrip("\n") + "\n"
