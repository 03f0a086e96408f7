"""Harbor's task.toml keys: network per phase, resource sizes, keys nothing reads, links out of the task folder."""

from pathlib import Path

import pytest

import tackroom
from tackroom import NetworkPolicy
from tackroom._config import NetworkDefaults, RuntimeConfig, validate
from tackroom._task import load_dataset, phase_networks

TB2_SAMPLE = Path(__file__).resolve().parents[3] / "shared" / "tb2-sample"


def make_task(root: Path, toml: str = "", name: str = "t") -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "instruction.md").write_text("do it")
    (d / "task.toml").write_text(toml)
    return d


def networks(tmp_path: Path, toml: str, defaults: NetworkDefaults | None = None):
    return phase_networks(tackroom.load_task(make_task(tmp_path, toml)).config, defaults)


PUBLIC, NONE = NetworkPolicy(mode="public"), NetworkPolicy()


def test_a_task_that_declares_nothing_gets_the_runs_default_per_phase(tmp_path):
    assert networks(tmp_path / "a", "") == networks(tmp_path / "b", "[agent]\ntimeout_sec = 5\n")
    plain = networks(tmp_path / "c", "")
    assert (plain.agent, plain.grading, plain.agent_declared, plain.grading_declared) == (NONE, NONE, False, False)
    split = networks(tmp_path / "d", "", NetworkDefaults(agent="none", grading="public"))
    assert (split.agent, split.grading) == (NONE, PUBLIC)


@pytest.mark.parametrize(("toml", "agent", "grading"), [
    ('[environment]\nnetwork_mode = "public"\n', PUBLIC, PUBLIC),
    ('[environment]\nnetwork_mode = "no-network"\n', NONE, NONE),
    ("[environment]\nallow_internet = true\n", PUBLIC, PUBLIC),
    ("[environment]\nallow_internet = false\n", NONE, NONE),
    # network_mode wins over the older key, as in Harbor
    ('[environment]\nallow_internet = false\nnetwork_mode = "public"\n', PUBLIC, PUBLIC),
    # Harbor 0.26's per-phase overrides
    ('[environment]\nnetwork_mode = "public"\n[agent]\nnetwork_mode = "no-network"\n', NONE, PUBLIC),
    ('[agent]\nnetwork_mode = "no-network"\n[verifier]\nnetwork_mode = "public"\n', NONE, PUBLIC),
    ('[verifier]\nallowed_hosts = ["PyPI.org", "files.pythonhosted.org."]\n', PUBLIC,
     NetworkPolicy(mode="allowlist", allowed_hosts=("pypi.org", "files.pythonhosted.org"))),
])
def test_the_tasks_declaration_wins_over_the_runs_default(tmp_path, toml, agent, grading):
    got = networks(tmp_path, toml, NetworkDefaults(agent="public", grading="public"))
    assert (got.agent, got.grading) == (agent, grading)
    assert got.agent_declared or got.grading_declared


@pytest.mark.parametrize(("toml", "message"), [
    ('[environment]\nnetwork_mode = "internet"\n', "environment.network_mode"),
    ('[agent]\nnetwork_mode = "public"\nallowed_hosts = ["a.example"]\n', "need mode \"allowlist\""),
    ('[verifier]\nallowed_hosts = ["https://pypi.org/simple"]\n', "not URLs"),
    ('[environment]\nnetwork_mode = "allowlist"\n', "at least one entry in allowed_hosts"),
])
def test_a_bad_network_key_is_a_task_error_naming_it(tmp_path, toml, message):
    with pytest.raises(tackroom.TaskError, match="task.toml") as err:
        tackroom.load_task(make_task(tmp_path, toml))
    assert message in str(err.value)


def test_the_run_configs_network_default_and_its_shorthand():
    assert validate(RuntimeConfig, {"network": "public"}).network == NetworkDefaults(agent="public", grading="public")
    split = validate(RuntimeConfig, {"network": {"agent": "no-network",
                                                 "grading": {"mode": "allowlist", "allowed_hosts": ["pypi.org"]}}})
    assert split.network.agent == NONE and split.network.grading.allowed_hosts == ("pypi.org",)
    with pytest.raises(tackroom.ConfigError, match=r"x.toml: network.agent.mode: Input should be 'none'"):
        validate(RuntimeConfig, {"network": {"agent": "internet"}}, source="x.toml")


def test_the_spec_reads_allow_internet_as_public_and_refuses_a_contradiction():
    assert tackroom.SandboxSpec(name="a", allow_internet=True).network == PUBLIC
    assert tackroom.SandboxSpec(name="a", network=PUBLIC).allow_internet is True
    with pytest.raises(ValueError, match="contradicts"):
        tackroom.SandboxSpec(name="a", allow_internet=True, network=NONE)


@pytest.mark.parametrize(("memory", "storage", "cpus", "want"), [
    ('"2G"', '"10G"', "1", (2048, 10240, 1.0)),
    ('"512M"', '"1.5G"', "2.5", (512, 1536, 2.5)),
    ('"8Gi"', '"2048"', "4", (8192, 2048, 4.0)),
    ("4096", '"1TB"', "1", (4096, 1024 * 1024, 1.0)),
])
def test_harbors_resource_keys_fill_memory_mb_and_storage_mb(tmp_path, memory, storage, cpus, want):
    env = tackroom.load_task(make_task(tmp_path, f"[environment]\nmemory = {memory}\nstorage = {storage}\n"
                                                 f"cpus = {cpus}\n")).config.environment
    assert (env.memory_mb, env.storage_mb, env.cpus) == want


@pytest.mark.parametrize("size", ['"lots"', '"-2G"', '"G"', "0", '"infG"', "true"])
def test_a_bad_size_is_a_task_error_naming_the_key(tmp_path, size):
    with pytest.raises(tackroom.TaskError, match=r"task.toml: environment.memory"):
        tackroom.load_task(make_task(tmp_path, f"[environment]\nmemory = {size}\n"))


def test_every_tb2_sample_task_gets_the_memory_it_asks_for():
    if not TB2_SAMPLE.is_dir():
        pytest.skip(f"{TB2_SAMPLE} is not here (the shared TB2 sample)")
    dataset = load_dataset(TB2_SAMPLE)
    assert not dataset.failures and len(dataset.tasks) == 4
    for task in dataset.tasks:
        env = task.config.environment
        assert (env.memory_mb, env.storage_mb) == (2048, 10240), task.id
        assert task.warnings == [], task.id


def test_keys_nothing_reads_are_named_once_in_the_tasks_warnings(tmp_path):
    task = tackroom.load_task(make_task(tmp_path, '[environment]\ngpus = 1\nmemory = "1G"\nmemory_mb = 4096\n'
                                                  '[agent]\nuser = "agent"\ntimeout_sec = 5\n[verifier]\ntimout_sec = 3\n'
                                                  '[solution]\nenv = {A = "1"}\n[metadata]\nauthor_name = "x"\n'))
    unread, sizes = task.warnings
    for key in ("agent.user", "verifier.timout_sec", "environment.gpus", "solution.env"):
        assert key in unread
    assert "metadata" not in unread and "timeout_sec," not in unread
    assert "memory (1024 MB) ignored; memory_mb (4096) wins" in sizes
    assert tackroom.load_task(make_task(tmp_path / "clean", "[agent]\ntimeout_sec = 5\n")).warnings == []


@pytest.mark.parametrize("where", ["instruction.md", "environment/Dockerfile", "tests/test.sh", "tests"])
def test_a_link_out_of_the_task_folder_is_a_task_error_that_quotes_nothing(tmp_path, where):
    secret = tmp_path / "host-secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    task = make_task(tmp_path, "", name="t")
    (task / "environment").mkdir()
    if where != "tests":
        (task / "tests").mkdir()
    link = task / where
    link.unlink(missing_ok=True)
    link.symlink_to(secret if where != "tests" else tmp_path)
    with pytest.raises(tackroom.TaskError, match="points outside the task folder") as err:
        tackroom.load_task(task)
    assert "TOP-SECRET-CONTENT" not in str(err.value) and "host-secret" not in str(err.value)
    dataset = load_dataset(tmp_path / "t")
    assert not dataset.tasks and "points outside" in dataset.failures[0].message


def test_links_inside_the_task_folder_are_fine(tmp_path):
    task = make_task(tmp_path)
    (task / "tests").mkdir()
    (task / "tests" / "real.sh").write_text("echo 1\n")
    (task / "tests" / "test.sh").symlink_to("real.sh")
    (task / "loop").symlink_to(task / "loop")
    with pytest.raises(tackroom.TaskError, match="loop: a symbolic link"):
        tackroom.load_task(task)
    (task / "loop").unlink()
    assert tackroom.load_task(task).instruction == "do it"


def test_loading_the_task_logs_its_warnings(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="tackroom"):
        tackroom.load_task(make_task(tmp_path, "[environment]\ngpus = 1\n"))
    assert [r.getMessage() for r in caplog.records if "environment.gpus" in r.getMessage()]
