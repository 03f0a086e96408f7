"""Loading Harbor-compatible task directories and datasets."""

from pathlib import Path

import pytest

import tackroom
from tackroom._task import load_dataset

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


def make_task(root: Path, name: str, toml: str = "", instruction: str = "do it") -> Path:
    d = root / name
    d.mkdir(parents=True)
    if instruction is not None:
        (d / "instruction.md").write_text(instruction)
    (d / "task.toml").write_text(toml)
    return d


def test_example_tasks_load_with_their_settings():
    ds = load_dataset(EXAMPLES)
    assert not ds.failures
    by_id = {t.id: t for t in ds.tasks}
    assert by_id["slow-agent"].config.agent.timeout_sec == 3
    assert by_id["csv-totals"].domain == "finance" and by_id["csv-totals"].dockerfile is not None


def test_harbor_fields_are_parsed(tmp_path):
    d = make_task(tmp_path, "t", '[agent]\ntimeout_sec = 5\n[verifier]\ntimeout_sec = 7\nenv = {A = "1"}\n'
                  '[environment]\ndocker_image = "img:1"\ncpus = 2\nmemory = "1G"\nmemory_mb = "2G"\n'
                  'allow_internet = true\n[metadata]\ncategory = "c"\n')
    t = tackroom.load_task(d)
    assert (t.config.agent.timeout_sec, t.config.verifier.timeout_sec, t.config.verifier.env) == (5, 7, {"A": "1"})
    env = t.config.environment
    assert (env.docker_image, env.cpus, env.memory_mb, env.allow_internet) == ("img:1", 2, 2048, True)
    assert t.category == "c"


def test_missing_instruction_names_the_file(tmp_path):
    d = make_task(tmp_path, "t", instruction=None)
    with pytest.raises(tackroom.TaskError, match=r"t/instruction.md: missing"):
        tackroom.load_task(d)


def test_bad_toml_and_bad_field_name_the_file(tmp_path):
    with pytest.raises(tackroom.TaskError, match=r"task.toml: invalid TOML"):
        tackroom.load_task(make_task(tmp_path, "a", "[agent\n"))
    with pytest.raises(tackroom.TaskError, match=r"task.toml: agent.timeout_sec: Input should be a valid number"):
        tackroom.load_task(make_task(tmp_path, "b", '[agent]\ntimeout_sec = "soon"\n'))


def test_one_bad_task_does_not_stop_the_others(tmp_path):
    make_task(tmp_path, "good")
    make_task(tmp_path, "bad", "[agent\n")
    make_task(tmp_path, "empty", instruction="   ")
    ds = load_dataset(tmp_path)
    assert [t.id for t in ds.tasks] == ["good"]
    assert sorted(f.path.name for f in ds.failures) == ["bad", "empty"]


def test_include_exclude_filters_and_missing_source(tmp_path):
    for n in ("csv-a", "csv-b", "txt-a"):
        make_task(tmp_path, n)
    assert [t.id for t in load_dataset(tmp_path, include=["csv-*"], exclude=["*-b"]).tasks] == ["csv-a"]
    assert [t.id for t in load_dataset([tmp_path / "txt-a", tmp_path / "csv-b"]).tasks] == ["txt-a", "csv-b"]
    with pytest.raises(tackroom.TaskError, match="no such task or dataset directory"):
        load_dataset(tmp_path / "nope")


def test_world_reference_must_exist(tmp_path):
    with pytest.raises(tackroom.TaskError, match=r"\[world\].path 'worlds/x' does not exist"):
        tackroom.load_task(make_task(tmp_path, "w", '[world]\npath = "worlds/x"\n'))


def test_write_task_writes_a_task_that_loads_with_what_it_was_given(tmp_path):
    from tackroom.testing import write_task

    d = write_task(tmp_path, "t", instruction="Write ok.\n", test_sh="echo 1 > /logs/verifier/reward.txt\n",
                   agent_timeout_sec=7, files={"expected/app/out.txt": "ok\n", "environment/blob.bin": b"\x00\xff"})
    task = tackroom.load_task(d)
    assert (task.instruction, task.config.agent.timeout_sec, task.config.verifier.timeout_sec) == ("Write ok.\n", 7, 30)
    assert (d / "tests" / "test.sh").read_text() == "echo 1 > /logs/verifier/reward.txt\n"
    assert not (d / "solution").exists()  # no solve_sh, no solution folder
    assert (d / "expected" / "app" / "out.txt").read_text() == "ok\n"
    assert (d / "environment" / "blob.bin").read_bytes() == b"\x00\xff"
    given = write_task(tmp_path, "u", toml="[agent]\ntimeout_sec = 3\n", solve_sh="true\n")
    assert tackroom.load_task(given).config.agent.timeout_sec == 3 and (given / "solution" / "solve.sh").is_file()
