"""Loading Harbor-compatible task directories and datasets."""

from pathlib import Path

import pytest

import tackroom

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


def make_task(root: Path, name: str, toml: str = "", instruction: str = "do it") -> Path:
    d = root / name
    d.mkdir(parents=True)
    if instruction is not None:
        (d / "instruction.md").write_text(instruction)
    (d / "task.toml").write_text(toml)
    return d


def test_example_tasks_load_with_their_settings():
    ds = tackroom.load_dataset(EXAMPLES)
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
    ds = tackroom.load_dataset(tmp_path)
    assert [t.id for t in ds.tasks] == ["good"]
    assert sorted(f.path.name for f in ds.failures) == ["bad", "empty"]


def test_include_exclude_filters_and_missing_source(tmp_path):
    for n in ("csv-a", "csv-b", "txt-a"):
        make_task(tmp_path, n)
    assert [t.id for t in tackroom.load_dataset(tmp_path, include=["csv-*"], exclude=["*-b"]).tasks] == ["csv-a"]
    assert [t.id for t in tackroom.load_dataset([tmp_path / "txt-a", tmp_path / "csv-b"]).tasks] == ["txt-a", "csv-b"]
    with pytest.raises(tackroom.TaskError, match="no such task or dataset directory"):
        tackroom.load_dataset(tmp_path / "nope")


def test_world_reference_must_exist(tmp_path):
    with pytest.raises(tackroom.TaskError, match=r"\[world\].path 'worlds/x' does not exist"):
        tackroom.load_task(make_task(tmp_path, "w", '[world]\npath = "worlds/x"\n'))
