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


# -- parallel runs (pytest-xdist, `--dist loadgroup` in pyproject's addopts) -----------------------
#
# Every test of a module runs on one worker, so module- and session-scoped fixtures (a gateway, a Ray
# cluster, a Docker image) are built once; tests that share an exclusive resource across modules carry
# `@pytest.mark.xdist_group("<name>")` and run on one worker together. Modules are handed out in the order
# below: the longest groups first, so the run's length is the longest group, not the sum of the tail.


# The inner-loop tier is `uv run pytest -m "not slow"`: besides tests marked `slow` by hand, everything that
# needs Docker, the real engine, the Tinker server or a hosted service is slow by definition.
SLOW_BY_NEED = ("docker", "engine", "tinker", "live")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(name) for name in SLOW_BY_NEED) or "engine_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
