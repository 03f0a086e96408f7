"""``[[arms]]`` and ``[eval]`` (tackroom_train.arms, .sweep, .evaluation).

The config half is exact: parsing, each arm's overrides applied and nothing else changed, one seed, errors
that list what exists. The orchestration runs with fake train / serve / evaluate steps (a real arm trains
for minutes); the real evaluation path — the matrix's Python API against a served SmolLM2 — runs against
the engine `tackroom model up` serves (skipped locally when none is up, a failure under CI), and
``examples/train/ablation.toml`` is the real end-to-end run (its table is in the README).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from tackroom import ConfigError
from tackroom_train.arms import EvalRow, arm_configs, nudge_field
from tackroom_train.config import load_train_config
from tackroom_train.sweep import ArmsReport, Steps, read_report, run_arms, train_and_evaluate

ROOT = Path(__file__).resolve().parents[3]
ABLATION = ROOT / "examples" / "train" / "ablation.toml"
OVERFIT_TASKS = ROOT / "examples" / "train" / "overfit-tasks"

BASE = f"""
tasks = ["{OVERFIT_TASKS}"]
backend = "tinker"
[harness]
name = "answer"
system = "One word."
max_tokens = 16
[sandbox]
name = "local"
[verifier]
name = "test-script"
[loss]
name = "dppo"
aggregation = "sequence_mean"
[model]
path = "smollm2"
[train]
seed = 7
max_training_steps = 2
"""


def _config(tmp_path: Path, extra: str, base: str = BASE) -> Any:
    path = tmp_path / "train.toml"
    path.write_text(base + extra)
    return load_train_config(path)


def _dump(config: Any) -> dict[str, Any]:
    return json.loads(config.model_dump_json())


def test_the_ablation_example_parses_with_one_seed_and_only_its_overrides() -> None:
    config = load_train_config(ABLATION)
    arms = arm_configs(config)
    assert [a.label for a, _ in arms] == ["dppo-token", "dppo-prompt", "glm5-prompt"]
    assert [(c.loss.name, c.loss.aggregation) for _, c in arms] == [
        ("dppo", "token_mean"), ("dppo", "prompt_mean"), ("glm5", "prompt_mean")]
    assert {c.train.seed for _, c in arms} == {config.train.seed} == {42}
    assert config.eval is not None and config.eval.passes == 3 and config.eval.baseline
    assert [h.name for h in config.eval.harnesses] == ["answer"]
    for _, arm_config in arms:
        assert arm_config.arms == [] and arm_config.eval == config.eval


def test_an_arm_changes_only_what_it_names(tmp_path: Path) -> None:
    config = _config(tmp_path, """
[[arms]]
label = "a"
loss = { aggregation = "prompt_mean" }
[[arms]]
label = "b"
loss = { name = "glm5", options = { } }
[[arms]]
label = "c"
harness = { max_tokens = 8 }
""")
    base = _dump(config)
    base["arms"] = []
    expected = {
        "a": {("loss", "aggregation"): "prompt_mean"},
        "b": {("loss", "name"): "glm5", ("loss", "options"): {}},
        "c": {("harness", "max_tokens"): 8},
    }
    for arm, arm_config in arm_configs(config):
        got = _dump(arm_config)
        diff = {(section, key): got[section][key] for section in got if isinstance(got[section], dict)
                for key in got[section] if got[section][key] != base[section].get(key)}
        diff.update({(k,): got[k] for k in got if not isinstance(got[k], dict) and got[k] != base[k]})
        assert diff == {k: v for k, v in expected[arm.label].items() if base[k[0]].get(k[1]) != v}
        assert arm_config.train.seed == 7
    # the base config itself is untouched
    assert config.loss.name == "dppo" and config.loss.aggregation == "sequence_mean" and len(config.arms) == 3


@pytest.mark.parametrize(("extra", "expected"), [
    ('[[arms]]\nlabel = "a"\nlr = 1\n', "unknown field 'lr'; an arm has: label, loss, nudge, harness"),
    ('[[arms]]\nlabel = "a"\nloss = { clip = 0.2 }\n',
     "unknown field 'clip'; an arm's loss has: name, aggregation, options"),
    ('[[arms]]\nlabel = "a"\nloss = { aggregation = "mean" }\n', "arms[0].loss.aggregation: Input should be 'token_mean'"),
    ('[[arms]]\nlabel = "a/b"\n', "must be a plain folder name"),
    ('[[arms]]\nlabel = "a"\n[[arms]]\nlabel = "a"\n', "arms[1].label: 'a' is already arms[0]'s label"),
    ('[eval]\npases = 3\n', "valid fields of eval: baseline, concurrency"),
    ('[eval]\n[[eval.harnesses]]\nname = "answer"\nsystem = "x"\n', "its own options go in `options`"),
])
def test_unknown_or_bad_fields_are_refused_naming_what_exists(tmp_path: Path, extra: str, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        _config(tmp_path, extra)
    assert expected in str(err.value)


@pytest.mark.parametrize(("extra", "expected"), [
    ('[[arms]]\nlabel = "a"\nharness = { max_token = 8 }\n',
     "arms[0] (a).harness: 'max_token' not an option of harness 'answer'; its options: "),
    ('[[arms]]\nlabel = "a"\nnudge = false\n', "arms[0] (a).nudge: harness 'answer' has no nudge option; its options:"),
    ('[[arms]]\nlabel = "a"\nloss = { name = "nope" }\n', "arms[0] (a).loss.name:"),
    ('[[arms]]\nlabel = "a"\nharness = { max_tokens = 0 }\n', "arms[0] (a).harness.max_tokens"),
])
def test_arm_overrides_are_checked_against_the_plugins(tmp_path: Path, extra: str, expected: str) -> None:
    config = _config(tmp_path, extra)
    with pytest.raises(ConfigError) as err:
        arm_configs(config)
    assert expected in str(err.value)
    if "options:" in expected:
        assert "max_tokens" in str(err.value)  # the list of what exists


def test_nudge_switches_archipelagos_budget_nudge(tmp_path: Path) -> None:
    from tackroom_archipelago.harness import ArchipelagoOptions

    assert nudge_field(ArchipelagoOptions) == "budget_nudge_ratio"
    base = BASE.replace('name = "answer"\nsystem = "One word."\nmax_tokens = 16', 'name = "archipelago"')
    config = _config(tmp_path, """
[[arms]]
label = "nudge-on"
nudge = true
[[arms]]
label = "nudge-off"
nudge = false
[[arms]]
label = "nudge-10"
harness = { budget_nudge_ratio = 0.1 }
""", base)
    ratios = {a.label: c.harness.model_extra.get("budget_nudge_ratio", "unset") for a, c in arm_configs(config)}
    assert ratios == {"nudge-on": 0.2, "nudge-off": None, "nudge-10": 0.1}
    both = _config(tmp_path, '[[arms]]\nlabel = "x"\nnudge = true\nharness = { budget_nudge_ratio = 0.1 }\n', base)
    with pytest.raises(ConfigError, match="either as nudge"):
        arm_configs(both)


def test_eval_section_resolves_its_plugins_before_training(tmp_path: Path) -> None:
    from tackroom_train.evaluation import check_eval, matrix_config

    config = _config(tmp_path, '[eval]\npasses = 2\n')
    matrix = matrix_config(config, "x", "http://127.0.0.1:9/v1", "x")
    assert [h.name for h in matrix.harnesses] == ["answer"]  # the training harness, with its options
    assert matrix.harnesses[0].options == {"system": "One word.", "max_tokens": 16}
    assert matrix.passes == 2 and matrix.tasks == config.tasks and matrix.sandbox.name == "local"
    check_eval(config)
    bad = _config(tmp_path, '[eval]\n[[eval.harnesses]]\nname = "answer"\noptions = { max_tokenz = 3 }\n')
    with pytest.raises(ConfigError, match="max_tokenz"):
        check_eval(bad)


class Fakes:
    """train / serve / evaluate without a trainer or an engine; records what ran and what is up."""

    def __init__(self, fail_train: set[str] = frozenset(), fail_eval: set[str] = frozenset()) -> None:
        self.trained: list[tuple[str, str, str | None, int]] = []
        self.up: set[str] = set()
        self.events: list[str] = []
        self.fail_train, self.fail_eval = fail_train, fail_eval

    async def train(self, config: Any, run_dir: Path, log: Any) -> Any:
        from tackroom_train.tinker.loop import TinkerRunSummary

        self.trained.append((run_dir.name, config.loss.name, config.loss.aggregation, config.train.seed))
        if run_dir.name in self.fail_train:
            raise RuntimeError("the trainer fell over")
        (run_dir / "policy").mkdir()
        summary = TinkerRunSummary(run_dir=str(run_dir), steps=2, first_reward=0.1, last_reward=0.5, best_reward=0.5,
                                   mismatch_mean=0.01, mismatch_warnings=0, curve_csv="", curve_png="",
                                   policy=str(run_dir / "policy"), reward_per_step=[0.1, 0.5],
                                   mismatch_per_step=[0.01, 0.01])
        (run_dir / "summary.json").write_text(summary.model_dump_json())
        return summary

    def serve(self, model: str | None, name: str, config: Any, log: Any) -> Any:
        @contextlib.asynccontextmanager
        async def engine():
            assert not self.up, "one engine at a time"
            self.up.add(name)
            self.events.append(f"up {name} {model}")
            try:
                yield f"http://fake/{name}/v1"
            finally:
                self.up.discard(name)
                self.events.append(f"down {name}")
        return engine()

    async def evaluate(self, config: Any, label: str, base_url: str, served: str, out: Path, log: Any) -> list[EvalRow]:
        assert base_url == f"http://fake/{label}/v1" and label in self.up
        if label in self.fail_eval:
            raise RuntimeError("the matrix fell over")
        score = {"base": 0.2}.get(label, 0.6)
        return [EvalRow(model=label, harness="answer", passes=config.eval.passes, n_trials=9, n_counted=9,
                        pass_at_1=score, pass_at_1_std=0.1, mean_reward=score, reward_std=0.05, turns=1.0,
                        assistant_tokens_per_turn=3.0)]

    def steps(self) -> Steps:
        return Steps(train=self.train, serve=self.serve, evaluate=self.evaluate, check=lambda config: None)


ARMS = """
[[arms]]
label = "tok"
loss = { aggregation = "token_mean" }
[[arms]]
label = "prompt"
loss = { aggregation = "prompt_mean" }
[[arms]]
label = "glm5"
loss = { name = "glm5", aggregation = "prompt_mean" }
[eval]
passes = 3
baseline = true
"""


async def test_arms_train_serve_evaluate_in_order_and_write_one_table(tmp_path: Path) -> None:
    config = _config(tmp_path, ARMS)
    fakes = Fakes()
    run = tmp_path / "run"
    report = await run_arms(config, run, steps=fakes.steps(), log=lambda s: None)
    assert fakes.trained == [("tok", "dppo", "token_mean", 7), ("prompt", "dppo", "prompt_mean", 7),
                             ("glm5", "glm5", "prompt_mean", 7)]
    assert fakes.events == ["up base None", "down base",
                            f"up tok {run}/arms/tok/policy", "down tok",
                            f"up prompt {run}/arms/prompt/policy", "down prompt",
                            f"up glm5 {run}/arms/glm5/policy", "down glm5"]
    assert [a.status for a in report.arms] == ["ok"] * 3
    assert read_report(run) == report
    md = (run / "arms.md").read_text()
    assert "| base | - | - | - | answer | 0.200 ± 0.100 |" in md
    assert "| tok | dppo | token_mean | - | answer | 0.600 ± 0.100 | 0.600 ± 0.050 | 1.00 | 3.0 |" in md
    assert "0.100 → 0.500" in md  # the training reward, first → last step
    # each arm's summary.json holds its eval table; its config.json the arm's whole config
    summary = json.loads((run / "arms" / "glm5" / "summary.json").read_text())
    assert summary["eval"][0]["pass_at_1"] == 0.6 and summary["reward_per_step"] == [0.1, 0.5]
    assert json.loads((run / "arms" / "glm5" / "config.json").read_text())["loss"]["name"] == "glm5"


async def test_a_failing_arm_is_recorded_the_engine_stopped_and_the_rest_run(tmp_path: Path) -> None:
    config = _config(tmp_path, ARMS)
    fakes = Fakes(fail_train={"tok"}, fail_eval={"prompt"})
    report = await run_arms(config, tmp_path / "run", steps=fakes.steps(), log=lambda s: None)
    status = {a.label: (a.status, a.error) for a in report.arms}
    assert status == {"tok": ("failed", "RuntimeError: the trainer fell over"),
                      "prompt": ("failed", "RuntimeError: the matrix fell over"), "glm5": ("ok", None)}
    assert not fakes.up and fakes.events.count("down prompt") == 1  # stopped although the evaluation failed
    assert report.arms[1].reward_per_step == [0.1, 0.5]  # it trained: the training half is kept
    assert "the trainer fell over" in (tmp_path / "run" / "arms.md").read_text()


async def test_a_rerun_resumes_finished_arms_and_evaluations(tmp_path: Path) -> None:
    config = _config(tmp_path, ARMS)
    first = Fakes(fail_eval={"prompt"})
    await run_arms(config, tmp_path / "run", steps=first.steps(), log=lambda s: None)
    again = Fakes()
    report = await run_arms(config, tmp_path / "run", steps=again.steps(), log=lambda s: None)
    assert again.trained == []  # every arm had a policy
    assert again.events == [f"up prompt {tmp_path}/run/arms/prompt/policy", "down prompt"]  # only the missing eval
    assert [a.status for a in report.arms] == ["ok"] * 3


async def test_a_single_run_with_eval_gets_the_table_in_its_summary(tmp_path: Path) -> None:
    config = _config(tmp_path, "[eval]\npasses = 2\n")
    fakes = Fakes()
    run = tmp_path / "single"
    run.mkdir()
    summary = await train_and_evaluate(config, run, steps=fakes.steps(), log=lambda s: None)
    assert fakes.events == [f"up single {run}/policy", "down single"]
    on_disk = json.loads((run / "summary.json").read_text())
    assert on_disk["eval"][0]["harness"] == "answer" and on_disk["eval"][0]["passes"] == 2
    assert on_disk["reward_per_step"] == [0.1, 0.5] and on_disk["mismatch_per_step"] == [0.01, 0.01]
    assert summary.eval is not None
    table = ArmsReport(run_dir=str(run), seed=7, passes=2, arms=[], baseline=summary.eval).markdown()
    assert "| single | - | - | - | answer | 0.600 ± 0.100 |" in table


def test_arms_on_the_skyrl_backend_are_refused(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "train.toml"
    path.write_text(BASE + ARMS + f'[rollout]\nout = "{tmp_path}"\n')
    out = subprocess.run([sys.executable, "-m", "tackroom_app", "train", str(path), "--backend", "skyrl",
                          "--run-id", "x"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**__import__("os").environ, "COLUMNS": "300"})
    assert out.returncode == 2, out.stdout + out.stderr
    assert "[[arms]] and [eval] run on the tinker backend" in out.stderr


async def test_the_real_matrix_evaluates_a_served_model(tmp_path: Path, engine_url: str) -> None:
    """The real evaluation path (matrix Python API, answer harness, local sandbox, test-script verifier)
    against the SmolLM2 engine `tackroom model up` serves (the root conftest's ``engine_url``: skipped locally
    without one, a failure under CI, and `slow`)."""
    from tackroom_train.evaluation import evaluate

    config = _config(tmp_path, "[eval]\npasses = 2\nsampling = { temperature = 1.0 }\n")
    rows = await evaluate(config, "smollm2", engine_url, "smollm2", tmp_path, log=lambda s: None)
    assert len(rows) == 1
    row = rows[0]
    assert (row.model, row.harness, row.passes, row.n_trials) == ("smollm2", "answer", 2, 6)
    assert row.non_model_error_rate == 0.0 and row.turns == 1.0 and row.assistant_tokens_per_turn
    assert row.pass_at_1 is not None and 0 <= row.pass_at_1 <= 1 and row.pass_at_1_std is not None
    assert (tmp_path / "eval" / "matrix.json").is_file()


class FakeEngineModule:
    """Stands in for tackroom_engine.engine's up/down/status/read_state (the engine's own tests cover them)."""

    def __init__(self, busy: bool = False, up_seconds: float = 0.0) -> None:
        self.busy, self.up_seconds = busy, up_seconds
        self.state: dict[int, Any] = {}
        self.calls: list[str] = []

    def up(self, settings: Any, log: Any) -> Any:
        import time
        from types import SimpleNamespace

        self.calls.append(f"up {settings.port} {settings.model} {settings.served_name}")
        time.sleep(self.up_seconds)
        self.state[settings.port] = SimpleNamespace(base_url=settings.base_url)
        return self.state[settings.port]

    def down(self, port: int) -> bool:
        self.calls.append(f"down {port}")
        return self.state.pop(port, None) is not None

    def status(self, port: int) -> dict[str, Any]:
        return {"running": self.busy or port in self.state}

    def read_state(self, port: int) -> Any:
        return self.state.get(port)


@pytest.fixture
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> FakeEngineModule:
    from tackroom_engine import engine

    fake = FakeEngineModule()
    for name in ("up", "down", "status", "read_state"):
        monkeypatch.setattr(engine, name, getattr(fake, name))
    return fake


async def test_serve_stops_its_engine_on_failure_and_never_touches_a_busy_port(tmp_path: Path,
                                                                               fake_engine: FakeEngineModule) -> None:
    import asyncio

    from tackroom_train.evaluation import serve

    config = _config(tmp_path, "[eval]\nport = 8031\n")
    with pytest.raises(RuntimeError, match="boom"):
        async with serve("/p", "arm", config, log=lambda s: None) as url:
            assert url == "http://127.0.0.1:8031/v1"
            raise RuntimeError("boom")
    assert fake_engine.calls == ["up 8031 /p arm", "down 8031"] and not fake_engine.state

    # cancelled while the engine is still starting: up() is let finish, then the engine is stopped
    fake_engine.calls.clear()
    fake_engine.up_seconds = 0.5

    async def use() -> None:
        async with serve("/p", "arm", config, log=lambda s: None):
            raise AssertionError("never reached")

    task = asyncio.create_task(use())
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fake_engine.calls == ["up 8031 /p arm", "down 8031"] and not fake_engine.state

    fake_engine.calls.clear()
    fake_engine.busy = True
    with pytest.raises(ConfigError, match="port 8031 already has an engine"):
        async with serve("/p", "arm", config, log=lambda s: None):
            pass
    assert fake_engine.calls == []  # nothing started, nothing stopped


async def test_a_failing_base_evaluation_is_recorded_and_the_arms_still_run(tmp_path: Path) -> None:
    config = _config(tmp_path, ARMS)
    fakes = Fakes(fail_eval={"base"})
    report = await run_arms(config, tmp_path / "run", steps=fakes.steps(), log=lambda s: None)
    assert report.baseline == [] and report.baseline_error == "RuntimeError: the matrix fell over"
    assert [a.status for a in report.arms] == ["ok"] * 3 and not fakes.up
    assert "| base | - | - | - | - | - |" in (tmp_path / "run" / "arms.md").read_text()
