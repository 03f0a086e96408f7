"""The error-rate pass before training: counts non-model errors and refuses above [train] max_error_rate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tackroom_app import TrialErrorInfo
from tackroom_train.config import TrainKnobs
from tackroom_train.error_rate import error_rate_pass, report_from

ROWS = [{"prompt": [{"role": "user", "content": f"q{i}"}], "task_id": f"t{i}", "task_path": f"/tasks/t{i}"}
        for i in range(4)]


class FakeGenerator:
    """Writes a result.json per trial as the trial runtime would and reports the error counts."""

    def __init__(self, run_root: Path, classes: list[str | None]) -> None:
        self.run_root, self.classes, self.calls = run_root, classes, []

    async def generate(self, batch):
        self.calls.append(batch)
        assert batch["batch_metadata"].global_step == 0
        folder = self.run_root / "step00000-00001-abc"
        for i, cls in enumerate(self.classes):
            error = None if cls is None else TrialErrorInfo(error_class=cls, type="SandboxError", phase="sandbox_start",
                                                        message=f"boom {i}").model_dump(by_alias=True)
            (folder / f"trial{i}").mkdir(parents=True)
            (folder / f"trial{i}" / "result.json").write_text(json.dumps({"trial_id": f"trial{i}", "error": error}))
        metrics = {f"tackroom/errors_{c}": sum(x == c for x in self.classes) for c in ("infra", "task", "model")}
        return {"rollout_metrics": metrics}


async def run(tmp_path, classes, limit=0.05, passes=2):
    gen = FakeGenerator(tmp_path / "preflight", classes)
    report = await error_rate_pass(gen, ROWS, passes=passes, max_error_rate=limit, temperature=1.0,
                                   max_generate_length=16, run_dir=tmp_path, log=lambda s: None)
    return gen, report


async def test_every_task_runs_passes_times_and_model_failures_do_not_count(tmp_path):
    gen, report = await run(tmp_path, [None, "model", "model", None, None, None, "model", None])
    (batch,) = gen.calls
    assert len(batch["prompts"]) == 8 and [e["task_id"] for e in batch["env_extras"]][:2] == ["t0", "t0"]
    assert report.passed and report.non_model_rate == 0 and report.errors == {"infra": 0, "task": 0, "model": 3}
    assert json.loads((tmp_path / "preflight.json").read_text())["passed"] is True


async def test_infra_and_task_errors_above_the_limit_fail_with_examples(tmp_path):
    _, report = await run(tmp_path, [None, "infra", "task", None, None, None, None, None], limit=0.2)
    assert not report.passed and report.non_model_rate == pytest.approx(0.25)
    assert [e.split(":")[0] for e in report.examples] == ["trial1", "trial2"]
    assert "infra in sandbox_start: boom 1" in report.describe() and "limit 20.0%" in report.describe()


def test_the_limit_is_a_share_and_the_pass_can_be_turned_off():
    assert TrainKnobs().max_error_rate == 0.05 and TrainKnobs().preflight_passes == 1
    assert TrainKnobs(preflight_passes=0).preflight_passes == 0
    with pytest.raises(ValueError):
        TrainKnobs(max_error_rate=1.5)
    assert report_from({}, 0, 0.05, Path("/nonexistent")).passed


def test_preflight_on_the_skyrl_backend_is_refused_with_the_way_to_do_it(tmp_path):
    import subprocess
    import sys

    config = Path(__file__).resolve().parents[3] / "examples" / "train" / "overfit.toml"
    out = subprocess.run([sys.executable, "-m", "tackroom_app", "train", str(config), "--backend", "skyrl",
                          "--preflight", "--run-id", "pf"], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert out.returncode == 2 and "--preflight runs on the tinker backend" in out.stderr, out.stderr
