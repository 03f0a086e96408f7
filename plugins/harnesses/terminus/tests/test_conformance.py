"""terminus passes the harness conformance kit on the local and docker sandboxes, and is registered."""

import pytest

from tackroom.testing import KIT_SOLUTION, HarnessScript, check_registered, harness_self_check
from tackroom_terminus import TerminusHarness

OPTIONS = {"max_command_duration_sec": 1.0, "request_retries": 1}


@pytest.fixture
def script(turn):
    return HarnessScript(solve=[turn(KIT_SOLUTION + "\n", complete=True), turn(complete=True)], idle=turn())


def test_registered_through_the_entry_point():
    cls = check_registered("harness", "terminus", distribution="tackroom-terminus")
    assert cls is TerminusHarness and cls.capabilities == {"chat", "needs_policy"}


async def test_conforms_on_local(local_provider, script):
    report = await harness_self_check(TerminusHarness, sandbox=local_provider, options=OPTIONS, script=script)
    assert not report.skipped


@pytest.mark.docker
async def test_conforms_on_docker(docker_provider, script):
    """The base image has no tmux: setup installs the host's packages offline (the container has no network)."""
    await harness_self_check(TerminusHarness, sandbox=docker_provider, options=OPTIONS, script=script)
