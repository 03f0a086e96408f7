"""Registers the ``claude-code`` harness and the ``tackroom claude-code`` commands."""

from __future__ import annotations

from typing import Any

from tackroom import hookimpl

tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@hookimpl
def tackroom_harnesses(register: Any) -> None:
    from tackroom_claude_code.harness import ClaudeCodeHarness

    register.add_harness(ClaudeCodeHarness)


@hookimpl
def tackroom_commands(app: Any) -> None:
    from tackroom_claude_code.commands import claude_code_app

    app.add_typer(claude_code_app, name="claude-code")
