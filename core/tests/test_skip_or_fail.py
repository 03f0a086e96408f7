"""The rule for a missing service or tool: a skip with the reason locally, a failure under CI."""

import pytest

from tackroom.testing import skip_or_fail


@pytest.mark.parametrize("ci", [None, "", "false", "1"])
def test_outside_ci_the_test_is_skipped_with_the_reason(monkeypatch, ci):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception, match="no Docker engine: start dockerd") as caught:
        skip_or_fail("no Docker engine: start dockerd")
    assert not isinstance(caught.value, pytest.fail.Exception)


def test_under_ci_the_test_fails_with_the_reason(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true and no Docker engine: start dockerd"):
        skip_or_fail("no Docker engine: start dockerd")
