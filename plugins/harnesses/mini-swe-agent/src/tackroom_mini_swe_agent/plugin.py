"""Registers the ``mini-swe-agent`` harness."""

from __future__ import annotations

from typing import Any

from tackroom import hookimpl

tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@hookimpl
def tackroom_harnesses(register: Any) -> None:
    from tackroom_mini_swe_agent.harness import MiniSweAgentHarness

    register.add_harness(MiniSweAgentHarness)
