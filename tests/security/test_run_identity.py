"""Run identity (issue 18, item 7): results never mix up silently.

Trial ids are a readable slug plus a hash of the task's source path and content, so
tasks whose names slug alike (``a b`` / ``a-b``, ``n`` / ``ünï``) or two datasets
holding a task of the same name get their own results. Generated run folders never
collide. Every run stores a fingerprint (task content hashes, plugin names and
options, model); a resume whose fingerprint differs is refused with what changed,
and ``--force-new`` starts a new run instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tackroom import ConfigError, TaskError, load_task, testing
from tackroom._task import task_source_hash
from tackroom._trial import Trial, label_part
from tackroom_app import RunConfig, claim_run_dir, load_dataset, run_config
from tackroom_matrix import parse_matrix_config, run_matrix

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tackroom_app", *args], capture_output=True, text=True,
                          timeout=timeout)


def write_task(root: Path, name: str, *, reward: str | None = None) -> Path:
    """A task the oracle solves (it writes /app/done) and nop does not; with ``reward`` its test script
    writes that reward whatever happened."""
    grade = f"echo {reward}" if reward is not None else "if [ -f /app/done ]; then echo 1; else echo 0; fi"
    return testing.write_task(root, name, instruction=f"Task {name}.\n", verifier_timeout_sec=60,
                              solve_sh="#!/bin/bash\nmkdir -p /app && echo ok > /app/done\n",
                              test_sh=f"#!/bin/bash\n{grade} > /logs/verifier/reward.txt\n")


def trial(task, **kw) -> Trial:
    return Trial.for_task(task, **{"harness": "oracle", "sandbox": "local", "verifier": "test-script", **kw})


def results_in(run_dir: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in run_dir.glob("*/result.json")}


# -- trial ids ------------------------------------------------------------------------------------------
def test_task_names_that_slug_alike_get_distinct_ids(tmp_path):
    for name in ("a b", "a-b", "n", "ünï", "a:b"):
        write_task(tmp_path / "ds", name)
    tasks = load_dataset([tmp_path / "ds"]).tasks
    ids = [trial(t).id for t in tasks]
    assert len(set(ids)) == len(tasks) == 5, ids
    assert {t.id for t in tasks} == {"a b", "a-b", "n", "ünï", "a:b"}
    for tid in ids:
        assert "/" not in tid and tid.isascii() and len(tid) < 120


def test_labels_that_slug_alike_get_distinct_ids_and_safe_labels_stay_readable(tmp_path):
    task = load_task(write_task(tmp_path, "t"))
    ids = {trial(task, harness=h, model=m).id for h in ("x y", "x-y", "x/y") for m in ("gpt/4", "gpt-4", None)}
    assert len(ids) == 9
    assert label_part("oracle") == "oracle" and label_part("smollm2") == "smollm2"
    assert label_part("x y") != label_part("x-y") and label_part("ünï") != label_part("n")
    assert label_part("..") not in (".", ".."), "never a path component that walks up"


def test_ids_are_stable_and_follow_the_task_source(tmp_path):
    task_dir = write_task(tmp_path / "a", "t")
    first = trial(load_task(task_dir)).id
    assert trial(load_task(task_dir)).id == first, "stable across loads (what makes a run resumable)"
    assert Trial(task_id="t", task_path=str(task_dir), harness="oracle", sandbox="local",
                 verifier="test-script").id == first, "the hash is computed from the path when not given"
    assert first.startswith("t-") and first.endswith("__oracle__p0")
    (task_dir / "tests" / "test.sh").write_text("echo 0 > /logs/verifier/reward.txt\n")
    assert trial(load_task(task_dir)).id != first, "a changed grader is a different task"
    copy = write_task(tmp_path / "b", "t")
    (copy / "tests" / "test.sh").write_text((task_dir / "tests" / "test.sh").read_text())
    assert trial(load_task(copy)).id != trial(load_task(task_dir)).id, "the same name elsewhere is another task"


def test_long_names_still_make_a_usable_folder_name(tmp_path):
    task = load_task(write_task(tmp_path, "t" * 200))
    tid = trial(task, harness="h" * 300, model="m" * 300, pass_index=999).id
    assert len(tid.encode()) < 200
    assert trial(task, harness="h" * 300 + "x", model="m" * 300, pass_index=999).id != tid


def test_hashing_a_hostile_task_never_hangs_or_follows_links(tmp_path):
    task_dir = write_task(tmp_path, "t")
    os.mkfifo(task_dir / "environment-fifo")  # reading it would block for ever
    (task_dir / "zero").symlink_to("/dev/zero")  # following it would never end
    (task_dir / "loop").symlink_to(task_dir)  # a cycle
    t0 = time.monotonic()
    before = task_source_hash(task_dir)
    assert time.monotonic() - t0 < 5 and task_source_hash(task_dir) == before
    (task_dir / "zero").unlink()
    (task_dir / "zero").symlink_to("/dev/null")
    assert task_source_hash(task_dir) != before, "a link's target is part of the content"
    with pytest.raises(TaskError, match="zero: a symbolic link that points outside the task folder"):
        load_task(task_dir)  # a task may not link out of its folder; the loop back into it is fine
    (task_dir / "zero").unlink()
    assert load_task(task_dir).source_hash == task_source_hash(task_dir)


def test_a_world_tasks_hash_covers_its_world(tmp_path):
    world = tmp_path / "worlds" / "w"
    world.mkdir(parents=True)
    (world / "data.csv").write_text("a,1\n")
    task_dir = write_task(tmp_path / "tasks", "t")
    (task_dir / "task.toml").write_text('[world]\npath = "../../worlds/w"\n')
    before = load_task(task_dir).source_hash
    (world / "data.csv").write_text("a,2\n")
    assert load_task(task_dir).source_hash != before


def test_two_datasets_with_a_task_of_the_same_name_stay_two_tasks(tmp_path):
    write_task(tmp_path / "ds1", "t1", reward="1")
    write_task(tmp_path / "ds2", "t1", reward="0")
    dataset = load_dataset([tmp_path / "ds1", tmp_path / "ds2"])
    assert [t.id for t in dataset.tasks] == ["ds1/t1", "ds2/t1"]
    assert [t.id for t in load_dataset([tmp_path / "ds1", tmp_path / "ds2"], include=["ds2/*"]).tasks] == ["ds2/t1"]
    assert len(load_dataset([tmp_path / "ds1", tmp_path / "ds2"], include=["t1"]).tasks) == 2
    (tmp_path / "ds3").mkdir()
    (tmp_path / "ds3" / "t1").symlink_to(tmp_path / "ds1" / "t1")  # the same task reached twice loads once
    assert [t.id for t in load_dataset([tmp_path / "ds1", tmp_path / "ds3"]).tasks] == ["t1"]

    out = cli("run", str(tmp_path / "ds1"), str(tmp_path / "ds2"), "--harness", "oracle", "--out",
              str(tmp_path / "runs"), "--run-id", "r", "--json")
    assert out.returncode == 0, out.stderr
    trials = json.loads(out.stdout)["trials"]
    assert sorted((t["task"], t["reward"]) for t in trials) == [("ds1/t1", 1.0), ("ds2/t1", 0.0)], trials
    assert len(results_in(tmp_path / "runs" / "r")) == 2, "one result folder each, none shared"


# -- run folders ----------------------------------------------------------------------------------------
def test_generated_run_folders_never_collide(tmp_path):
    dirs = {claim_run_dir(tmp_path, None) for _ in range(50)}  # all within the same second or two
    assert len(dirs) == 50 and all(d.is_dir() for d in dirs)
    # two real runs started together, neither naming its run
    args = [sys.executable, "-m", "tackroom_app", "run", str(EXAMPLES / "hello-file"), "--harness", "nop",
            "--out", str(tmp_path / "runs"), "--json"]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    run_dirs = {json.loads(o)["run_dir"] for o, _ in outs}
    assert len(run_dirs) == 2
    for d in run_dirs:
        assert len(results_in(Path(d))) == 1 and json.loads((Path(d) / "run.json").read_text())["fingerprint"]


# -- fingerprints: tackroom run ---------------------------------------------------------------------------
def test_a_resume_with_another_setup_is_refused_and_force_new_starts_a_new_run(tmp_path):
    tasks = tmp_path / "tasks"
    write_task(tasks, "t1")
    runs = tmp_path / "runs"
    base = ["run", str(tasks), "--harness", "oracle", "--out", str(runs), "--run-id", "r", "--json"]
    first = cli(*base)
    assert first.returncode == 0, first.stderr
    run_dir = runs / "r"
    record = json.loads((run_dir / "run.json").read_text())
    fp = record["fingerprint"]
    assert fp["verifier"] == {"name": "test-script", "options": {"tests_dir": "/tests", "keep_output_chars": 4000}}
    assert fp["harness"]["name"] == "oracle" and fp["sandbox"]["name"] == "local" and fp["policy"] is None
    (entry,) = fp["tasks"].values()
    assert entry["hash"] == load_task(tasks / "t1").source_hash
    before = results_in(run_dir)

    # the same setup resumes: nothing re-runs
    again = cli(*base)
    assert again.returncode == 0 and results_in(run_dir) == before

    # another verifier option set under the same run id: refused, naming what changed; nothing rewritten
    cfg = tmp_path / "short.toml"
    cfg.write_text('[verifier]\nname = "test-script"\nkeep_output_chars = 10\n')
    changed = cli(*base, "--config", str(cfg))
    assert changed.returncode == 2
    assert "verifier.options.keep_output_chars: was 4000, now 10" in changed.stderr, changed.stderr
    assert "--force-new" in changed.stderr
    assert json.loads((run_dir / "run.json").read_text()) == record and results_in(run_dir) == before

    # another verifier altogether
    other = cli(*base, "--verifier", "file-diff")
    assert other.returncode == 2 and "verifier.name: was \"test-script\", now \"file-diff\"" in other.stderr

    # --force-new: a new run beside it, the old one untouched
    fresh = cli(*base, "--config", str(cfg), "--force-new")
    assert fresh.returncode == 0, fresh.stderr
    new_dir = Path(json.loads(fresh.stdout)["run_dir"])
    assert new_dir != run_dir and new_dir.parent == runs and new_dir.name.startswith("r-")
    assert json.loads((new_dir / "run.json").read_text())["fingerprint"]["verifier"]["options"]["keep_output_chars"] == 10
    assert results_in(run_dir) == before and json.loads((run_dir / "run.json").read_text()) == record


def _config(tmp_path: Path, tasks: Path, **extra) -> RunConfig:
    data = {"tasks": [str(tasks)], "harness": {"name": "nop"}, "runtime": {"out": str(tmp_path / "runs")}}
    for key, value in extra.items():
        data[key] = value
    return RunConfig.model_validate(data)


async def test_changed_task_content_sandbox_options_or_model_are_refused(tmp_path):
    tasks = tmp_path / "tasks"
    task_dir = write_task(tasks, "t1")
    policy = {"base_url": "http://127.0.0.1:9/v1", "model": "m1"}  # nop never calls it
    await run_config(_config(tmp_path, tasks, policy=policy), progress=False, run_id="r")

    with pytest.raises(ConfigError, match=r'policy\.model: was "m1", now "m2"'):
        await run_config(_config(tmp_path, tasks, policy={**policy, "model": "m2"}), progress=False, run_id="r")
    with pytest.raises(ConfigError, match=r'policy\.sampling\.temperature: was \(not set\), now 1\.5'):
        await run_config(_config(tmp_path, tasks, policy={**policy, "sampling": {"temperature": 1.5}}),
                         progress=False, run_id="r")
    with pytest.raises(ConfigError, match=r"sandbox\.options\.output_limit_bytes: was 1000000, now 2000"):
        await run_config(_config(tmp_path, tasks, policy=policy,
                                 sandbox={"name": "local", "output_limit_bytes": 2000}), progress=False, run_id="r")
    (task_dir / "tests" / "test.sh").write_text("echo 0 > /logs/verifier/reward.txt\n")  # the grader changed
    with pytest.raises(ConfigError, match=r"task 't1' .*its content changed"):
        await run_config(_config(tmp_path, tasks, policy=policy), progress=False, run_id="r")
    run_dir, _, _ = await run_config(_config(tmp_path, tasks, policy=policy), progress=False, run_id="r",
                                     force_new=True)
    assert run_dir.name.startswith("r-") and run_dir.is_dir()


async def test_a_new_task_may_join_a_resumed_run(tmp_path):
    tasks = tmp_path / "tasks"
    write_task(tasks, "t1")
    _, first, _ = await run_config(_config(tmp_path, tasks), progress=False, run_id="r")
    write_task(tasks, "t2")
    run_dir, both, _ = await run_config(_config(tmp_path, tasks), progress=False, run_id="r")
    assert [r.task for r in both] == ["t1", "t2"] and both[0].started_at == first[0].started_at
    fp = json.loads((run_dir / "run.json").read_text())["fingerprint"]
    assert len(fp["tasks"]) == 2


async def test_a_run_folder_without_a_fingerprint_is_not_resumed(tmp_path):
    tasks = tmp_path / "tasks"
    write_task(tasks, "t1")
    run_dir, _, _ = await run_config(_config(tmp_path, tasks), progress=False, run_id="r")
    (run_dir / "run.json").unlink()  # as an older tackroom left it, or a tampered one
    with pytest.raises(ConfigError, match="no fingerprint"):
        await run_config(_config(tmp_path, tasks), progress=False, run_id="r")


# -- fingerprints: tackroom matrix ------------------------------------------------------------------------
def matrix_config(tmp_path: Path, tasks: Path, **overrides):
    data = {"tasks": [str(tasks)], "passes": 1, "harnesses": [{"name": "oracle"}],
            "runtime": {"out": str(tmp_path / "runs"), "run_id": "m", "retry_backoff_sec": 0.01}}
    data.update(overrides)
    return parse_matrix_config(data)


async def test_a_matrix_resume_with_changed_task_content_is_refused(tmp_path):
    tasks = tmp_path / "tasks"
    task_dir = write_task(tasks, "t1")
    first = await run_matrix(matrix_config(tmp_path, tasks), progress=False)
    saved = json.loads((first.run_dir / "matrix.config.json").read_text())
    (entry,) = saved["identity"]["tasks"].values()
    assert entry == {"id": "t1", "hash": load_task(task_dir).source_hash}
    (task_dir / "solution" / "solve.sh").write_text("#!/bin/bash\nexit 1\n")
    with pytest.raises(ConfigError, match=r"(?s)task 't1' .*content changed.*--force-new"):
        await run_matrix(matrix_config(tmp_path, tasks), progress=False)
    fresh = await run_matrix(matrix_config(tmp_path, tasks), progress=False, force_new=True)
    assert fresh.run_dir != first.run_dir and fresh.run_dir.name.startswith("m-")


async def test_matrix_labels_that_slug_alike_keep_their_own_results_and_a_forged_collision_is_refused(tmp_path):
    tasks = tmp_path / "tasks"
    write_task(tasks, "t1")
    rows = [{"name": "oracle", "label": "x y"}, {"name": "nop", "label": "x-y"}]
    outcome = await run_matrix(matrix_config(tmp_path, tasks, harnesses=rows), progress=False)
    cells = {c.harness: c for c in outcome.cells}
    assert cells["x y"].pass_at_1 == 1.0 and cells["x-y"].pass_at_1 == 0.0
    assert len(results_in(outcome.run_dir)) == 2
    forged = [{"name": "oracle", "label": "x y"}, {"name": "nop", "label": label_part("x y")}]
    with pytest.raises(ConfigError, match="would be shared by more than one trial"):
        await run_matrix(matrix_config(tmp_path, tasks, harnesses=forged,
                                       runtime={"out": str(tmp_path / "runs"), "run_id": "forged"}), progress=False)


def test_tackroom_matrix_force_new_flag(tmp_path):
    tasks = tmp_path / "tasks"
    write_task(tasks, "t1")
    cfg = tmp_path / "m.toml"
    cfg.write_text(f'tasks = ["{tasks}"]\n[[harnesses]]\nname = "oracle"\n[runtime]\nout = "{tmp_path / "runs"}"\n')
    first = cli("matrix", str(cfg), "--json")
    assert first.returncode == 0, first.stderr
    cfg.write_text(cfg.read_text() + '[sandbox]\nname = "local"\noutput_limit_bytes = 2000\n')
    refused = cli("matrix", str(cfg), "--json")
    assert refused.returncode == 2 and "sandbox: was" in refused.stderr and "--force-new" in refused.stderr
    fresh = cli("matrix", str(cfg), "--json", "--force-new")
    assert fresh.returncode == 0, fresh.stderr
    assert json.loads(fresh.stdout)["run_dir"] != json.loads(first.stdout)["run_dir"]
    assert json.loads(fresh.stdout)["cells"][0]["pass_at_1"] == 1.0
