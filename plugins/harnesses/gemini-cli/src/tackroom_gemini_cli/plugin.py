"""Registers the ``gemini-cli`` harness."""

from __future__ import annotations

from typing import Any

from tackroom import hookimpl

tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@hookimpl
def tackroom_harnesses(register: Any) -> None:
    from tackroom_gemini_cli.harness import GeminiCliHarness

    register.add_harness(GeminiCliHarness)
