"""Fixtures shared by every test directory of the workspace."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "engine: needs the real local engine; skipped with a reason locally, fails under CI",
    )


@pytest.fixture(scope="session")
def engine_url() -> str:
    """The real local engine's OpenAI base URL.

    ``TACKROOM_ENGINE_URL`` when set, else the engine ``tackroom model up``
    started (``scripts/setup`` starts it). Locally a missing engine skips the
    test with a reason; under CI (``CI=true``) it is a failure.
    """
    url = os.environ.get("TACKROOM_ENGINE_URL")
    if url:
        return url.rstrip("/")
    from tackroom_engine import running_engine_url

    url = running_engine_url()
    if url:
        return url
    message = "no local engine: run `tackroom model up` (or set TACKROOM_ENGINE_URL)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)
