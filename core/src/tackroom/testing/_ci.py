"""The suite's rule for a missing service or tool: skipped with the reason on a developer's machine, failed under CI."""

from __future__ import annotations

import os
from typing import NoReturn


def skip_or_fail(reason: str) -> NoReturn:
    """Skip the calling test with ``reason``; under CI (``CI=true``, as GitHub Actions and ``.ci/run`` set it) fail it.

    For a test that needs something the machine may lack (a Docker engine, the local engine, a converted
    model, Chromium): a developer without it sees a skip that says what to install, while CI, which must
    run every test for real, goes red instead of green-with-skips. ``reason`` says what is missing and how
    to get it.
    """
    import pytest  # on use: the conformance kit imports without pytest (a plugin's own suite may not use it)

    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)
