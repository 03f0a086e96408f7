"""Fixtures for the gemini-cli harness tests: the real Gemini CLI install, the real SmolLM2 tokenizer."""

from __future__ import annotations

import asyncio

import pytest


@pytest.fixture(scope="session")
def gemini_cli_install():
    """The pinned Gemini CLI and Node from npm, in the host cache (installed on first use)."""
    from tackroom_gemini_cli.install import ensure_installed

    return asyncio.run(ensure_installed())


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    from tackroom_gateway import load_tokenizer

    return load_tokenizer("smollm2")
