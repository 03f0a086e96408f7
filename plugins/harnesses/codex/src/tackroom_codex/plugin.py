"""Registers the ``codex`` harness and the ``tackroom codex`` commands."""

from __future__ import annotations

from typing import Any

from tackroom import hookimpl

tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@hookimpl
def tackroom_harnesses(register: Any) -> None:
    from tackroom_codex.harness import CodexHarness

    register.add_harness(CodexHarness)


@hookimpl
def tackroom_commands(app: Any) -> None:
    from tackroom_codex.commands import codex_app

    app.add_typer(codex_app, name="codex")
