"""Whose failure a crash or a hang is (infra before the model's first reply reached the agent, the model's after it),
how an exit reads, and the ``tackroom <agent> install`` command a harness builds from the kit."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from tackroom import Trajectory
from tackroom_agent_kit import (
    AgentCrashError,
    AgentModelError,
    AgentTimeoutError,
    ModelRelay,
    NpmInstallError,
    answered,
    crash_or_model,
    exit_described,
)
from tackroom_agent_kit.commands import install_app


class ToyCrashError(AgentCrashError):
    """A harness's own crash error."""


class ToyModelError(AgentModelError):
    """A harness's own model error."""


def test_before_the_first_reply_a_crash_is_infra_and_keeps_its_message():
    trajectory = Trajectory(messages=[{"role": "user", "content": "hi"}])
    error = crash_or_model("Toy exited with status 1 before its first turn\n--- toy stderr (tail) ---\nboom", 0,
                           trajectory, crash=ToyCrashError, model=ToyModelError)
    assert type(error) is ToyCrashError and error.error_class == "infra" and error.trajectory is trajectory
    assert str(error) == "Toy exited with status 1 before its first turn\n--- toy stderr (tail) ---\nboom"


def test_after_a_reply_it_is_the_models_and_says_why_before_the_log():
    error = crash_or_model("Toy made no progress for 10s and was stopped\n--- toy stderr (tail) ---\nboom", 2,
                           Trajectory(), crash=ToyCrashError, model=ToyModelError)
    assert type(error) is ToyModelError and error.error_class == "model"
    first, log = str(error).split("\n", 1)
    assert first.startswith("Toy made no progress for 10s and was stopped, after 2 model replies whose tool calls run")
    assert "counted as the model's (reward 0, not retried)" in first and log == "--- toy stderr (tail) ---\nboom"
    one = crash_or_model("Toy was killed by SIGSEGV", 1, Trajectory(), crash=ToyCrashError, model=ToyModelError)
    assert "after 1 model reply whose" in str(one)


def test_replies_that_reached_the_agent_count_what_the_relay_answered():
    relay = ModelRelay("http://127.0.0.1:9/v1", max_calls=None)
    relay.calls, relay.failures, relay.refused = 5, 1, 1
    assert answered(relay) == 3
    assert answered(relay, steps=4) == 4  # the agent wrote down more than the relay saw answered in full


def test_a_timeout_is_the_models_and_never_a_timeout_error():
    error = AgentTimeoutError("still working at the agent timeout", Trajectory())
    assert error.error_class == "model" and not isinstance(error, TimeoutError) and error.trajectory is not None


def test_an_exit_reads_as_what_happened_and_a_sigkill_names_the_memory_limit():
    assert exit_described("1", 2048) == "exited with status 1"
    assert exit_described("", None) == "died without an exit status"
    died = exit_described(None, 256, needs_mb=512, agent="Toy")  # the OOM killer took the waiting shell too
    assert died.startswith("died without an exit status (the shell waiting for it was killed as well)")
    assert "memory limit of 256 MB" in died and "Toy needs at least 512 MB" in died
    assert exit_described("139", 2048).startswith("was killed by SIGSEGV (signal 11")
    killed = exit_described("137", 256, needs_mb=512, agent="Toy")
    assert "memory limit of 256 MB" in killed and "[environment] memory_mb" in killed
    assert killed.endswith("Toy needs at least 512 MB")
    assert "needs at least" not in exit_described("-9", 256)


def test_the_install_command_prints_what_it_shipped_and_fails_with_the_fix(tmp_path):
    calls = []

    def install(version: str | None, cache_dir: Path | None, timeout: float) -> str:
        calls.append((version, cache_dir, timeout))
        if version == "0.0.0":
            raise NpmInstallError("`npm install toy@0.0.0` failed (exit 1): no such version")
        return f"toy {version or '1.2.3'}: {cache_dir}/toy"

    cli = typer.Typer()
    cli.add_typer(install_app("Toy", package="toy", cache_name="toy", install=install), name="toy")
    out = CliRunner().invoke(cli, ["toy", "install", "--cache-dir", str(tmp_path)])
    assert out.exit_code == 0 and f"toy 1.2.3: {tmp_path}/toy" in out.output, out.output
    assert calls == [(None, tmp_path, 600.0)]
    out = CliRunner().invoke(cli, ["toy", "install", "--version", "0.0.0", "--timeout", "5"])
    assert out.exit_code == 1 and "error: `npm install toy@0.0.0` failed" in out.output
    assert calls[-1] == ("0.0.0", None, 5.0)
    assert "Install Toy from npm" in CliRunner().invoke(cli, ["toy", "--help"]).output
