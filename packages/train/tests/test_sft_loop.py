"""Where the ``[sft]`` warm start sits in the Tinker loop, with the loop's parts replaced by recorders (a whole RL run
against the real server is test_tinker_overfit.py's half hour; the warm start itself against it is
test_sft_tinker.py): on the run's LoRA, before the sampler publishes version 0, so RL's first rollouts sample the
warm policy and the RL steps continue on the same client; with ``then_rl = false`` no sampler and no RL step.
Also the trackers' step axis across the two phases and the console's progress bar."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tackroom_train.config import load_train_config
from tackroom_train.demonstrations import Demonstration, write_jsonl
from tackroom_train.plan import resolve_plan
from tackroom_train.tinker import loop
from tackroom_train.tinker.server import TinkerCalls, TinkerSettings
from tackroom_train.tinker.sft import SftReport
from tackroom_train.tinker.step_trainer import LossChoice
from tackroom_train.tracking import ProgressTracker, TrackerSet, progress_columns

TASKS = Path(__file__).resolve().parents[3] / "examples" / "train" / "overfit-tasks"


def write_config(tmp_path: Path, sft: str, *, extra: str = "", tasks: bool = False) -> Path:
    """A tinker train config beside two demonstrations in SmolLM2's ids (one held out)."""
    write_jsonl(tmp_path / "demos.jsonl", [
        Demonstration(task_id="t", harness="answer", reward=1.0, input_ids=[1, 2, 3], loss_mask=[0, 1, 1],
                      tokenizer="smollm2", split=split) for split in ("train", "eval")])
    head = f"tasks = [\"{TASKS}\"]\n" if tasks else ""
    path = tmp_path / "train.toml"
    path.write_text(f"{head}backend = \"tinker\"\n[model]\npath = \"smollm2\"\n{extra}\n"
                    f"[sft]\ndataset = \"demos.jsonl\"\n{sft}\n")
    return path


class RecordingClient:
    """Stands for the LoRA training client: the loop's order is the point here, not the server's answers."""

    def __init__(self, events: list[Any]) -> None:
        self.events = events

    async def save_for_sampler(self, name: str, what: str) -> str:
        self.events.append(("save", name))
        return f"tinker://run/{name}"


class RecordingSampler:
    def describe(self) -> str:
        return "a recorder"


def record_the_loop(monkeypatch: pytest.MonkeyPatch, events: list[Any]) -> SftReport:
    report = SftReport(dataset="d", demonstrations=3, held_out=1, truncated=0, dropped=0, epochs=1, steps=1,
                       batch_size=8, learning_rate=1e-4)
    client = RecordingClient(events)

    async def create(service: Any, call: Any, *, base_model: str, rank: int) -> Any:
        events.append(("client", base_model))
        return client

    async def warm_start(sft: Any, on: Any, **kwargs: Any) -> SftReport:
        events.append(("sft", on is client))
        return report

    async def sampler(plan: Any, on: Any, server: Any, log: Any) -> RecordingSampler:
        events.append(("version 0", on is client))
        return RecordingSampler()

    async def run_steps(plan: Any, scope: Any, server: Any, parts: Any) -> str:
        events.append(("rl", parts.client is client, parts.warm is report, parts.warm_policy))
        return "rl summary"

    async def export(weights: str | None, scope: Any, server: Any, *, name: str = "policy") -> Any:
        events.append(("merge", weights, name))
        return loop.FinalPolicy(weights, loop.PolicyFolder(path=str(scope.run_dir / name), base_model="base",
                                                           adapter="a", checkpoint=weights, rank=8, alpha=16.0,
                                                           scale=2.0, merged_modules=1, dtype="bfloat16",
                                                           chat_template="training tokenizer"))

    async def warm_only(plan: Any, scope: Any, server: Any, on: Any, warm: Any) -> str:
        events.append(("export", on is client, warm is report))
        return "sft summary"

    monkeypatch.setattr(loop.TrainingClient, "create", staticmethod(create))
    monkeypatch.setattr(loop, "warm_start", warm_start)
    monkeypatch.setattr(loop, "_sampler", sampler)
    monkeypatch.setattr(loop, "_run_steps", run_steps)
    monkeypatch.setattr(loop, "_warm_start_only", warm_only)
    monkeypatch.setattr(loop, "_export", export)
    return report


@pytest.mark.parametrize("then_rl", [True, False])
def test_the_warm_start_trains_the_runs_lora_before_version_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              then_rl: bool) -> None:
    plan = resolve_plan(load_train_config(write_config(tmp_path, f"then_rl = {str(then_rl).lower()}", tasks=then_rl)))
    events: list[Any] = []
    record_the_loop(monkeypatch, events)
    server = loop.Server(call=TinkerCalls(TinkerSettings()), base_model="base", tokenizer=None)
    result = asyncio.run(loop._build(plan, loop.RunScope(tmp_path / "run"), server,
                                     LossChoice.choose(plan.loss, "auto")))
    if then_rl:  # the warm start alone is written too (<run>/warm-policy), the policy RL starts from
        warm = str(tmp_path / "run" / "warm-policy")
        assert events == [("client", "base"), ("sft", True), ("save", "warm"), ("merge", "tinker://run/warm", "warm-policy"),
                          ("version 0", True), ("rl", True, True, warm)]
        assert result == "rl summary"
    else:
        assert events == [("client", "base"), ("sft", True), ("export", True, True)] and result == "sft summary"


def test_the_run_starts_from_init_from_and_an_sft_only_run_starts_no_engine(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "runs" / "warm" / "policy"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    path = write_config(tmp_path, "then_rl = false", extra="init_from = \"runs/warm\"\ntokenizer = \"smollm2\"")
    plan = resolve_plan(load_train_config(path))
    seen: dict[str, Any] = {}

    async def connected(plan: Any, scope: Any, server: Any, loss: Any, url: str) -> str:
        seen.update(base=server.base_model, engine=server.engine, url=url)
        return "done"

    monkeypatch.setattr(loop, "check_reachable", lambda url: None)
    monkeypatch.setattr(loop, "_connected", connected)
    plan = plan.model_copy(update={"tinker": plan.tinker.model_copy(update={"url": "http://127.0.0.1:9"})})
    assert asyncio.run(loop.train_on_tinker(plan, loop.RunScope(tmp_path / "run"))) == "done"
    assert seen == {"base": str(run.resolve()), "engine": None, "url": "http://127.0.0.1:9"}


def test_rl_steps_are_tracked_above_the_warm_starts_and_the_bar_shows_each_phase() -> None:
    from rich.console import Console
    from rich.progress import Progress

    class Recorder:
        name = "recorder"

        def __init__(self) -> None:
            self.steps: list[int] = []

        def log(self, metrics: dict[str, float], step: int) -> None:
            self.steps.append(step)

        def close(self) -> None:
            pass

    console = Console(record=True, width=160, force_terminal=False)
    recorder = Recorder()
    with Progress(*progress_columns(), console=console, auto_refresh=False) as bar:
        progress = ProgressTracker(bar)
        trackers = TrackerSet([progress, recorder], print)
        trackers.start(3, phase="sft")
        for step in (1, 2, 3):
            trackers.log({"sft/loss": 2.0 / step, "sft/trained_tokens": 40.0}, step)
        trackers.offset = 3  # what warm_start leaves
        trackers.start(10)
        trackers.log({"reward/mean": 0.25, "mismatch/mean": 0.02}, 1)
        sft_task, rl_task = bar.tasks[1], bar.tasks[0]
        assert (sft_task.completed, sft_task.total, rl_task.completed, rl_task.total) == (3, 3, 1, 10)
        bar.refresh()
    assert recorder.steps == [1, 2, 3, 4]
    shown = console.export_text()
    assert "sft loss 0.667, 40 tokens · step 3/3" in shown and "step 1/10" in shown and "reward 0.250" in shown
