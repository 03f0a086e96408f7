"""Registers the ``opencode`` harness and the ``tackroom opencode`` commands."""

from __future__ import annotations

from typing import Any

from tackroom import hookimpl

tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@hookimpl
def tackroom_harnesses(register: Any) -> None:
    from tackroom_opencode.harness import OpenCodeHarness

    register.add_harness(OpenCodeHarness)


@hookimpl
def tackroom_commands(app: Any) -> None:
    from tackroom_opencode.commands import opencode_app

    app.add_typer(opencode_app, name="opencode")
