"""``[rubric_judge]``: the judge sees what changed under ``files`` against the task's own ``baseline`` folder."""

from __future__ import annotations

import pytest

import tackroom
from tackroom_app import sandbox_spec
from tackroom_local import LocalSandboxProvider
from tackroom_rubric_judge import RubricJudgeVerifier
from tackroom_rubric_judge.baseline import task_settings

TABLE = '[rubric_judge]\nfiles = ["/app/world"]\nbaseline = { "/app/world" = "snapshot" }\n'


def make_task(rubric_task_dir, extra_toml: str = TABLE):
    task = rubric_task_dir([{"criterion": "The notes were left as they were"}], extra_toml=extra_toml)
    (task / "snapshot" / "sub").mkdir(parents=True)
    (task / "snapshot" / "notes.txt").write_text("one\n")
    (task / "snapshot" / "sub" / "keep.txt").write_text("kept\n")
    return tackroom.load_task(task)


async def test_the_diff_is_against_the_baseline_not_the_empty_sandbox(rubric_task_dir, judge_server):
    task = make_task(rubric_task_dir)
    server = judge_server(script=["ok"])
    judge = RubricJudgeVerifier({"base_url": server.base_url, "model": "judge"})
    box = LocalSandboxProvider().create(sandbox_spec(task, "rubric-baseline"))
    await box.start()
    try:
        await judge.prepare(task, box)  # before the world is there, as in a trial (the harness installs it later)
        await box.upload(task.path / "snapshot", "/app/world")
        await box.write_file("/app/world/notes.txt", "one\ntwo\n")
        reward = await judge.verify(task, box, tackroom.Trajectory(final_answer="done"))
    finally:
        await box.stop()
    report = reward.details["files_report"]
    assert "/app/world/notes.txt" in report and "+two" in report, report
    assert "keep.txt" not in report, report  # unchanged against the baseline: not reported as added


@pytest.mark.parametrize(("table", "message"), [
    ('[rubric_judge]\nfiles = ["app"]\n', "must be an absolute sandbox path"),
    ('[rubric_judge]\nbaseline = { "/app" = "../../etc" }\n', "is not a folder in the task"),
    ('[rubric_judge]\nbaseline = { "/app" = "nowhere" }\n', "is not a folder in the task"),
    ('[rubric_judge]\nfile = ["/app"]\n', "rubric_judge.file: Extra inputs are not permitted"),
])
def test_a_bad_rubric_judge_table_names_the_field(rubric_task_dir, table, message):
    task = make_task(rubric_task_dir, table)
    with pytest.raises(tackroom.TaskError, match=message):
        task_settings(task)
