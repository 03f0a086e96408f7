"""How a program ended, from the exit status a shell or Python reports: real processes killed by real signals."""

from __future__ import annotations

import signal
import subprocess

import pytest

from tackroom_sandbox_kit import describe_exit, exit_signal


@pytest.mark.parametrize("sig", [signal.SIGBUS, signal.SIGSEGV, signal.SIGKILL])
def test_a_process_killed_by_a_signal_is_named_from_bash_and_from_python(sig):
    via_shell = subprocess.run(["bash", "-c", f"bash -c 'kill -{sig.name[3:]} $$'; echo $?"], capture_output=True,
                               text=True, check=True).stdout.strip()
    assert via_shell == str(128 + sig)
    direct = subprocess.run(["bash", "-c", f"kill -{sig.name[3:]} $$"], check=False).returncode
    assert direct == -sig
    for status in (via_shell, direct, int(via_shell)):
        assert exit_signal(status) == sig
        assert describe_exit(status).startswith(f"was killed by {sig.name} (signal {int(sig)}, ")


def test_the_words_for_each_crash():
    assert describe_exit("135") == "was killed by SIGBUS (signal 7, bus error; exit status 135)"
    assert describe_exit(139) == "was killed by SIGSEGV (signal 11, segmentation fault; exit status 139)"
    assert "OOM killer" in describe_exit(137)
    assert describe_exit(-6) == "was killed by SIGABRT (signal 6, aborted; exit status -6)"


@pytest.mark.parametrize("status", [0, 1, 2, 127, 128, 255, "1\n"])
def test_an_ordinary_exit_is_not_a_signal(status):
    assert exit_signal(status) is None
    assert describe_exit(status) == f"exited with status {str(status).strip()}"


@pytest.mark.parametrize("status", [None, "", "  ", "garbage", "-"])
def test_no_status_or_an_unreadable_one(status):
    assert exit_signal(status) is None
    assert describe_exit(status) in ("died without an exit status", f"exited with status {str(status).strip()}")
    if status is None or not str(status).strip():
        assert describe_exit(status) == "died without an exit status"
