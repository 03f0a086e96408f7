"""The file-diff verifier: registered, configured by the task, and run end to end on the local sandbox."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import tackroom
import tackroom_app
from tackroom import Trial
from tackroom.testing import check_registered
from tackroom_app import TrialPlugins, TrialRuntime
from tackroom_file_diff import FileChangeTracker, FileDiffVerifier, expected_outputs
from tackroom_local import LocalSandboxProvider

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the local sandbox needs bubblewrap")

SOLVE = """#!/bin/bash
set -e
mkdir -p /app/out
{ echo region,total,mean
  awk -F, 'NR > 1 {t[$1]+=$2; n[$1]++} END {for (r in t) printf "%s,%.5f,%.5f\\n", r, t[r], t[r]/n[r]}' /app/sales.csv | sort -r
} > /app/out/totals.csv
cp /solution/summary.docx /solution/book.xlsx /app/out/
echo '{"status": "done", "regions": 2}' > /app/out/status.json
sed -i 's/draft/final/' /app/notes.txt
rm /app/scratch.txt
echo "wrote /app/out"
"""


def write_task(root: Path, make_xlsx, make_docx) -> Path:
    """A file-output task: totals from a csv, a docx summary, a workbook with a formula, a json status."""
    task = root / "quarterly-files"
    (task / "environment" / "data").mkdir(parents=True)
    (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\nCOPY data/ /app/\n")
    (task / "environment" / "data" / "sales.csv").write_text("region,amount\nnorth,10\nnorth,0\nnorth,0\nsouth,7\n")
    (task / "environment" / "data" / "scratch.txt").write_text("temporary\n")
    (task / "environment" / "data" / "notes.txt").write_text("status: draft\n")
    (task / "instruction.md").write_text("Write per-region totals and means to /app/out/totals.csv, ...\n")
    (task / "task.toml").write_text(
        'version = "1.0"\nexpected_outputs = ["/app/out"]\n'
        "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n"
        '[file_diff]\nmust_not_exist = ["/app/scratch.txt"]\nweights = { "/app/out/totals.csv" = 2.0 }\n'
        '[file_diff.formats.csv]\nabs_tol = 0.01\n'
    )
    summary = make_docx(["North sold 10 units.", "South sold 7 units."], heading="Q1 summary")
    book = make_xlsx({"Totals": {"A1": "north", "B1": 10, "A2": "south", "B2": 7, "A3": "all", "B3": "=SUM(B1:B2)"}})
    (task / "solution").mkdir()
    (task / "solution" / "solve.sh").write_text(SOLVE)
    (task / "solution" / "summary.docx").write_bytes(summary)
    (task / "solution" / "book.xlsx").write_bytes(book)
    out = task / "expected" / "app" / "out"
    out.mkdir(parents=True)
    (out / "totals.csv").write_text("region,total,mean\nsouth,7,7\nnorth,10,3.33\n")
    (out / "summary.docx").write_bytes(summary)
    (out / "book.xlsx").write_bytes(make_xlsx({"Totals": {"A1": "north", "B1": 10, "A2": "south", "B2": 7,
                                                          "A3": "all", "B3": 17}}))
    (out / "status.json").write_text('{"regions": 2, "status": "done"}')
    return task


def test_file_diff_is_registered_and_conforms():
    cls = check_registered("verifier", "file-diff", distribution="tackroom-file-diff")
    assert cls is FileDiffVerifier


def test_the_catalogue_lists_it_as_registered():
    import tomllib

    catalogue = tomllib.loads((Path(tackroom.__file__).parent / "registry.toml").read_text())["plugin"]
    (entry,) = [p for p in catalogue if p["name"] == "file-diff"]
    assert (entry["kind"], entry["distribution"], entry["entry_point"]) == ("verifier", "tackroom-file-diff", "file-diff")
    assert entry["summary"] == FileDiffVerifier.summary()


def test_selected_by_name_with_nested_options():
    verifier = tackroom_app.instantiate("verifier", tackroom_app.PluginSelection(
        name="file-diff", score="all_pass", tolerance={"abs_tol": 0.5}, formats={"xlsx": {"compare": "both"}}))
    options = verifier.options
    assert isinstance(verifier, FileDiffVerifier)
    assert options.tolerance.abs_tol == 0.5 and options.formats["xlsx"].compare == "both"
    with pytest.raises(tackroom.ConfigError, match="verifier.tolerance.abs_tl"):
        tackroom_app.instantiate("verifier", tackroom_app.PluginSelection(name="file-diff", tolerance={"abs_tl": 0.5}))
    with pytest.raises(tackroom.ConfigError, match="verifier.formats.xslx"):
        tackroom_app.instantiate("verifier", tackroom_app.PluginSelection(name="file-diff", formats={"xslx": {}}))


def test_a_task_without_expected_files_is_a_task_error(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "instruction.md").write_text("do it\n")
    task = tackroom.load_task(tmp_path / "t")
    with pytest.raises(tackroom.TaskError, match=r"put each expected output under expected/ at its sandbox path"):
        FileDiffVerifier().plan(task)


def test_a_bad_file_diff_table_names_the_field(tmp_path, make_xlsx, make_docx):
    task_dir = write_task(tmp_path, make_xlsx, make_docx)
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text().replace("abs_tol = 0.01", "abs_tl = 0.01"))
    with pytest.raises(tackroom.TaskError, match=r"file_diff\.formats\.csv\.abs_tl: Extra inputs are not permitted"):
        FileDiffVerifier().plan(tackroom.load_task(task_dir))


def test_expected_outputs_must_be_a_list_of_paths(tmp_path, make_xlsx, make_docx):
    task_dir = write_task(tmp_path, make_xlsx, make_docx)
    assert expected_outputs(tackroom.load_task(task_dir)) == ["/app/out"]
    toml = task_dir / "task.toml"
    toml.write_text(toml.read_text().replace('expected_outputs = ["/app/out"]', 'expected_outputs = "/app/out"'))
    with pytest.raises(tackroom.TaskError, match=r"task.toml: expected_outputs: Input should be a valid list \(the "
                                                 r"\[expected_outputs\] table is read by the file-diff plugin\)"):
        FileDiffVerifier().plan(tackroom.load_task(task_dir))


@needs_bwrap
async def test_prepare_then_verify_on_the_local_sandbox(tmp_path, make_xlsx, make_docx):
    task = tackroom.load_task(write_task(tmp_path, make_xlsx, make_docx))
    verifier = FileDiffVerifier({"paths": ["/app"], "forbid_other_changes": True})
    sandbox = LocalSandboxProvider().create(tackroom.SandboxSpec(name="fd", environment_dir=task.environment_dir))
    async with sandbox:
        await verifier.prepare(task, sandbox)
        # the agent: one table right within tolerance, one number wrong, a stray file, scratch left behind
        await sandbox.write_file("/app/out/totals.csv", "region,total,mean\nsouth,7,7\nnorth,10,3.333333\n")
        await sandbox.write_file("/app/out/status.json", '{"status": "done", "regions": 3}')
        await sandbox.write_file("/app/out/book.xlsx", make_xlsx({"Totals": {"A1": "north", "B1": 10, "A2": "south",
                                                                             "B2": 7, "A3": "all", "B3": "=B1+B2"}}))
        await sandbox.write_file("/app/stray.log", "debug\n")
        reward = await verifier.verify(task, sandbox, tackroom.Trajectory())
    c = reward.components
    assert c["file:/app/out/totals.csv"] == 1.0
    assert c["file:/app/out/book.xlsx"] == 1.0  # the formula's evaluated value is 17
    assert c["file:/app/out/status.json"] == 0.5
    assert c["file:/app/out/summary.docx"] == 0.0
    assert c["absent:/app/scratch.txt"] == 0.0
    assert c["no_other_changes"] == 0.0 and reward.details["other_changes"] == ["/app/stray.log"]
    # weighted mean: totals.csv counts twice
    assert reward.score == pytest.approx((2 * 1.0 + 1.0 + 0.5 + 0.0 + 0.0 + 0.0) / 7)
    grades = {g["path"]: g for g in reward.details["grades"]}
    assert grades["/app/out/summary.docx"]["status"] == "missing"
    assert grades["/app/out/totals.csv"]["rules"]["abs_tol"] == 0.01  # the task's per-format rule
    changes = reward.details["changes"]
    assert set(changes["added"]) == {"/app/out/totals.csv", "/app/out/status.json", "/app/out/book.xlsx",
                                     "/app/stray.log"}
    book = next(f for f in changes["files"] if f["path"] == "/app/out/book.xlsx")
    b3 = next(c for c in book["cell_changes"] if c["cell"] == "B3")
    assert (b3["after"], b3["after_formula"], b3["source"]) == (17, "=B1+B2", "evaluated")


@needs_bwrap
async def test_the_tracker_helper_reports_what_changed(tmp_path, make_docx):
    sandbox = LocalSandboxProvider().create(tackroom.SandboxSpec(name="tr"))
    async with sandbox:
        await sandbox.write_file("/app/doc.docx", make_docx(["First.", "Second."]))
        tracker = FileChangeTracker(["/app"])
        await tracker.before(sandbox)
        await sandbox.write_file("/app/doc.docx", make_docx(["First.", "Second, edited."]))
        report = await tracker.after(sandbox)
    assert report.modified == ["/app/doc.docx"]
    assert "~ [1->1] 'Second.' -> 'Second, edited.'" in report.to_text()


@needs_bwrap
async def test_end_to_end_trials_oracle_scores_one_and_nop_scores_zero(tmp_path, make_xlsx, make_docx):
    task = tackroom.load_task(write_task(tmp_path, make_xlsx, make_docx))
    manager = tackroom_app.PluginManager(env={})
    runtime = TrialRuntime(tmp_path / "run", progress=False, manager=manager, attempts=1)
    verifier = tackroom_app.instantiate("verifier", "file-diff", manager=manager)
    items = []
    for name in ("oracle", "nop"):
        harness = tackroom_app.instantiate("harness", name, manager=manager)
        plugins = TrialPlugins.from_instances(harness, LocalSandboxProvider(), verifier)
        trial = Trial(task_id=task.id, task_path=str(task.path), harness=name, sandbox="local", verifier="file-diff")
        items.append((trial, task, plugins))
    oracle, nop = await runtime.run_all(items)
    assert oracle.error is None, oracle.error
    assert oracle.reward == 1.0 and set(oracle.components) == {
        "file:/app/out/totals.csv", "file:/app/out/summary.docx", "file:/app/out/book.xlsx",
        "file:/app/out/status.json", "absent:/app/scratch.txt"}
    changes = oracle.reward_details["changes"]
    assert changes["removed"] == ["/app/scratch.txt"] and changes["modified"] == []
    assert nop.error is None and nop.reward == 0.0
    assert (tmp_path / "run" / oracle.trial_id / "result.json").is_file()
    assert oracle.timings["verifier_prepare"] < 5 and oracle.timings["verify"] < 30
