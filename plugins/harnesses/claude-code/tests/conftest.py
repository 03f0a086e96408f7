"""Fixtures for the claude-code harness tests: the real Claude Code install, the real SmolLM2 tokenizer, tasks."""

from __future__ import annotations

import asyncio

import pytest


@pytest.fixture(scope="session")
def claude_install():
    """The pinned Claude Code from npm, in the host cache (installed on first use)."""
    from tackroom_claude_code.install import ensure_installed

    return asyncio.run(ensure_installed())


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    from tackroom_gateway import load_tokenizer

    return load_tokenizer("smollm2")

