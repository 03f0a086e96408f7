"""The Gemini CLI's ``settings.json`` for one trial: its only model the trial's policy, nothing interactive.

What the file pins, and why:

* auth ``gemini-api-key`` with ``GOOGLE_GEMINI_BASE_URL`` (set in the environment) pointing at the relay: the CLI
  speaks Google's Gemini API to the gateway's Gemini dialect, which records the exact tokens;
* ``tools.core``: only the chosen built-in tools are registered (the CLI sends each one's declaration with every
  call); Google-hosted tools (``google_web_search``, ``web_fetch``) are never among them: the gateway refuses them;
* ``model.maxSessionTurns``: the CLI's own turn limit (the relay also refuses the call after the last allowed one);
* ``skipNextSpeakerCheck``, ``disableLoopDetection`` and a ``compressionThreshold`` of 1: no side conversations that
  ask the model about the conversation, and no summary that rewrites it (on-policy token accounting);
* no telemetry, usage statistics, update checks or interactive shell.
"""

from __future__ import annotations

from typing import Any

COMPACT_TOOLS = ("run_shell_command", "read_file", "write_file", "replace")
"""The smallest useful set; with the compact prompt, a first request is ~2.4k tokens (the stock one ~11k)."""
FULL_TOOLS = ("run_shell_command", "read_file", "write_file", "replace", "list_directory", "glob",
              "search_file_content", "read_many_files", "write_todos")
"""The CLI's local tools: everything but Google-hosted search and fetch, memory and sub-agents."""

COMPACT_PROMPT = (
    "You are a coding agent working in a terminal sandbox. Complete the user's task by calling the tools: run "
    "shell commands with run_shell_command, and read, write or edit files. Work in the current directory unless "
    "the task names other paths. When the task is done, reply with a one-line summary and stop.\n"
)
"""The system prompt of the ``compact`` profile (``GEMINI_SYSTEM_MD``; the CLI's own is ~9k tokens)."""


def build_settings(*, tools: tuple[str, ...], max_turns: int | None) -> dict[str, Any]:
    """The ``~/.gemini/settings.json`` document."""
    model: dict[str, Any] = {"skipNextSpeakerCheck": True, "disableLoopDetection": True, "compressionThreshold": 1}
    if max_turns is not None:
        model["maxSessionTurns"] = max_turns
    return {
        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True, "checkpointing": {"enabled": False}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False, "logPrompts": False},
        "model": model,
        "tools": {"core": list(tools), "useRipgrep": False, "shell": {"enableInteractiveShell": False}},
        "ui": {"hideBanner": True, "hideTips": True},
    }
