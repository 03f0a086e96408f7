"""Fixtures for the codex harness tests: the real Codex install, the real SmolLM2 tokenizer, tasks."""

from __future__ import annotations

import asyncio

import pytest


@pytest.fixture(scope="session")
def codex_install():
    """The pinned Codex from npm, in the host cache (installed on first use)."""
    from tackroom_codex.install import ensure_installed

    return asyncio.run(ensure_installed())


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    from tackroom_gateway import load_tokenizer

    return load_tokenizer("smollm2")

