"""Input validation at load, and again after command-line overrides (issue 18, item 6).

Each test attacks the way a hostile task file or config (or a slip of the finger on
the command line) would: a timeout of 0, -5, nan or inf, a memory size of "infG", a
concurrency of 0 (which used to hang for ever) or -3 (which used to print a
traceback), a run id that walks out of the runs directory. Every one must be a
clear ConfigError/TaskError naming the field and the file (or the flag).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from tackroom import ConfigError, TaskError, load_task, testing
from tackroom_app import RunConfig, claim_run_dir, load_dataset, load_run_config, run_config
from tackroom_matrix import load_matrix_config, parse_matrix_config, run_matrix

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`tackroom …` as a user runs it; a hang is a failure (TimeoutExpired), not a wait."""
    return subprocess.run([sys.executable, "-m", "tackroom_app", *args], capture_output=True, text=True,
                          timeout=timeout)


def write_task(root: Path, name: str, toml: str) -> Path:
    return testing.write_task(root, name, instruction="Write /app/x.\n", toml=toml,
                              test_sh="echo 0 > /logs/verifier/reward.txt\n")


# -- task.toml --------------------------------------------------------------------------------------
BAD_SECONDS = ["0", "-5", "nan", "inf", "-inf", "true", "1e12"]


@pytest.mark.parametrize("section,field", [("agent", "timeout_sec"), ("verifier", "timeout_sec"),
                                           ("environment", "build_timeout_sec")])
@pytest.mark.parametrize("value", BAD_SECONDS)
def test_a_task_timeout_that_is_not_a_positive_finite_number_is_refused(tmp_path, section, field, value):
    task = write_task(tmp_path, "t", f"[{section}]\n{field} = {value}\n")
    with pytest.raises(TaskError) as err:
        load_task(task)
    message = str(err.value)
    assert str(task / "task.toml") in message, "the error names the file"
    assert f"{section}.{field}" in message, "the error names the field"


@pytest.mark.parametrize("toml", [
    "memory_mb = 0", "memory_mb = -512", 'memory_mb = "0G"', 'memory_mb = "-2G"', 'memory_mb = "infG"',
    'memory_mb = "nanM"', 'memory_mb = "lotsG"', "memory_mb = true", "cpus = 0", "cpus = -1", "cpus = nan",
    "cpus = inf", "storage_mb = 0", "storage_mb = -10",
])
def test_task_resources_must_be_positive(tmp_path, toml):
    task = write_task(tmp_path, "t", f"[environment]\n{toml}\n")
    with pytest.raises(TaskError) as err:  # never an OverflowError/ValueError traceback
        load_task(task)
    field = toml.split(" = ")[0]
    assert f"environment.{field}" in str(err.value) and str(task / "task.toml") in str(err.value)


def test_sane_task_values_still_load(tmp_path):
    task = load_task(write_task(tmp_path, "t", '[agent]\ntimeout_sec = 0.5\n[verifier]\ntimeout_sec = 3600\n'
                                "[environment]\nbuild_timeout_sec = 90\ncpus = 0.5\n"
                                'memory_mb = "2G"\nstorage_mb = 4096\n'))
    env = task.config.environment
    assert task.config.agent.timeout_sec == 0.5 and env.memory_mb == 2048 and env.cpus == 0.5
    assert env.storage_mb == 4096 and task.config.verifier.timeout_sec == 3600


def test_one_hostile_task_never_stops_the_rest_and_is_reported_with_its_field(tmp_path):
    write_task(tmp_path / "ds", "good", "[agent]\ntimeout_sec = 30\n")
    write_task(tmp_path / "ds", "hostile", "[agent]\ntimeout_sec = -5\n")
    dataset = load_dataset([tmp_path / "ds"])
    assert [t.id for t in dataset.tasks] == ["good"]
    (failure,) = dataset.failures
    assert "agent.timeout_sec" in failure.message and "positive, finite" in failure.message


def test_tackroom_run_reports_a_hostile_task_instead_of_running_it(tmp_path):
    write_task(tmp_path / "ds", "hostile", "[agent]\ntimeout_sec = nan\n")
    out = cli("run", str(tmp_path / "ds"), "--harness", "nop", "--out", str(tmp_path / "runs"))
    assert out.returncode == 2, out.stderr
    assert "every task failed to load" in out.stderr and "agent.timeout_sec" in out.stderr
    assert "Traceback" not in out.stderr


# -- run config ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("runtime,field", [
    ("concurrency = 0", "runtime.concurrency"), ("concurrency = -3", "runtime.concurrency"),
    ("concurrency = true", "runtime.concurrency"), ("attempts = 0", "runtime.attempts"),
    ("attempts = -1", "runtime.attempts"), ("teardown_timeout_sec = nan", "runtime.teardown_timeout_sec"),
    ("teardown_timeout_sec = 0", "runtime.teardown_timeout_sec"), ("retry_backoff_sec = -1", "runtime.retry_backoff_sec"),
    ("retry_backoff_sec = inf", "runtime.retry_backoff_sec"), ('run_id = "../escape"', "runtime.run_id"),
    ('run_id = ""', "runtime.run_id"), ('run_id = "a/b"', "runtime.run_id"), ('run_id = ".."', "runtime.run_id"),
    ('run_id = "."', "runtime.run_id"), ('run_id = "/tmp/abs"', "runtime.run_id"), ('run_id = "x\\u0000y"', "runtime.run_id"),
])
def test_a_run_config_with_a_bad_runtime_value_names_the_file_and_field(tmp_path, runtime, field):
    f = tmp_path / "run.toml"
    f.write_text(f"[runtime]\n{runtime}\n")
    with pytest.raises(ConfigError) as err:
        load_run_config(f)
    assert f"{f}: {field}" in str(err.value)


@pytest.mark.parametrize("flags,needle", [
    (["--concurrency", "0"], "--concurrency (runtime.concurrency)"),
    (["--concurrency", "-3"], "--concurrency (runtime.concurrency)"),
    (["--attempts", "0"], "--attempts (runtime.attempts)"),
    (["--run-id", "../escape"], "--run-id (runtime.run_id)"),
    (["--run-id", ""], "--run-id (runtime.run_id)"),
    (["--executor", "bogus"], "--executor (runtime.executor)"),
])
def test_tackroom_run_flags_get_the_config_checks(tmp_path, flags, needle):
    # --concurrency 0 used to hang for ever and -3 to print a traceback; each is now refused before anything runs
    out = cli("run", str(EXAMPLES / "hello-file"), "--harness", "nop", "--out", str(tmp_path / "runs"), *flags,
              timeout=90)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert needle in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "escape").exists() and not (tmp_path / "runs").exists(), "nothing was created"


def test_a_flag_overriding_a_good_file_value_is_checked_and_the_file_value_blamed_on_the_file(tmp_path):
    f = tmp_path / "run.toml"
    f.write_text(f'tasks = ["{EXAMPLES / "hello-file"}"]\n[harness]\nname = "nop"\n[runtime]\nconcurrency = 2\n'
                 f'out = "{tmp_path / "runs"}"\n')
    out = cli("run", "--config", str(f), "--concurrency", "-3")
    assert out.returncode == 2 and "--concurrency (runtime.concurrency)" in out.stderr, out.stderr


async def test_values_set_in_code_are_checked_before_a_run_starts(tmp_path):
    config = RunConfig.model_validate({"tasks": [str(EXAMPLES / "hello-file")], "harness": {"name": "nop"},
                                       "runtime": {"out": str(tmp_path / "runs")}})
    config.runtime.concurrency = 0  # pydantic does not check assignments: run_config must
    with pytest.raises(ConfigError, match=r"runtime\.concurrency"):
        await asyncio.wait_for(run_config(config, progress=False), 60)
    config.runtime.concurrency = 1
    with pytest.raises(ConfigError, match="plain name"):
        await run_config(config, progress=False, run_id="../../escape")
    assert not (tmp_path / "runs").exists() and not (tmp_path.parent / "escape").exists()


@pytest.mark.parametrize("bad", ["..", "../x", "a/../b", "a/b", "", " ", "-rf", "x\ny", "a\\b", "." * 3, "x" * 200])
def test_claim_run_dir_refuses_anything_but_a_plain_name(tmp_path, bad):
    with pytest.raises(ConfigError):
        claim_run_dir(tmp_path / "runs", bad)
    assert not any(p.name != "runs" for p in tmp_path.iterdir())


# -- matrix config --------------------------------------------------------------------------------------
@pytest.mark.parametrize("extra,field", [
    ("passes = 0", "passes"), ("passes = true", "passes"), ("k = 0", "k"), ("probe_timeout_sec = inf", "probe_timeout_sec"),
    ("probe_timeout_sec = 0", "probe_timeout_sec"), ("pass_threshold = nan", "pass_threshold"),
    ("[runtime]\nconcurrency = 0", "runtime.concurrency"), ("[runtime]\nattempts = 0", "runtime.attempts"),
    ('[runtime]\nrun_id = "../../x"', "runtime.run_id"),
])
def test_a_matrix_config_with_a_bad_value_names_the_file_and_field(tmp_path, extra, field):
    f = tmp_path / "m.toml"
    f.write_text(f'tasks = ["{EXAMPLES}"]\n{extra}\n')
    with pytest.raises(ConfigError) as err:
        load_matrix_config(f)
    assert f"{f}: {field}" in str(err.value)


def test_a_matrix_config_named_with_dots_gets_a_plain_default_run_id(tmp_path):
    f = tmp_path / "a..b.toml"
    f.write_text(f'tasks = ["{EXAMPLES}"]\n')
    assert ".." not in load_matrix_config(f).runtime.run_id


@pytest.mark.parametrize("flags,needle", [
    (["--concurrency", "0"], "--concurrency (runtime.concurrency)"),
    (["--concurrency", "-3"], "--concurrency (runtime.concurrency)"),
    (["--run-id", "../../escape"], "--run-id (runtime.run_id)"),
])
def test_tackroom_matrix_flags_get_the_config_checks(tmp_path, flags, needle):
    # --concurrency 0 used to be clamped to 1 silently; it is refused like the same value in the file
    f = tmp_path / "m.toml"
    f.write_text(f'tasks = ["{EXAMPLES}"]\ninclude = ["hello-file"]\n[runtime]\nout = "{tmp_path / "runs"}"\n')
    out = cli("matrix", str(f), *flags, timeout=90)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert needle in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path.parent / "escape").exists()


async def test_run_matrix_checks_values_set_in_code(tmp_path):
    config = parse_matrix_config({"tasks": [str(EXAMPLES)], "include": ["hello-file"],
                                  "runtime": {"out": str(tmp_path / "runs"), "run_id": "m"}})
    config.runtime.concurrency = 0
    with pytest.raises(ConfigError, match=r"runtime\.concurrency"):
        await asyncio.wait_for(run_matrix(config, progress=False), 60)
    config.runtime.concurrency = 1
    with pytest.raises(ConfigError, match="plain name"):
        await run_matrix(config, progress=False, run_id="../escape")
    assert not (tmp_path / "runs").exists()
