"""Rollouts from a ``tackroom serve`` (``tackroom train --rollouts URL``): a real service on a loopback port (uvicorn,
SQLite, its own trial runtime, the test token), driven by :class:`RemoteGenerator` with SkyRL's own input types (its
``PromptDataset`` and ``prepare_generator_input``) and by one rollout phase of the Tinker loop (``Rollouts``).

The same rows go through the local :class:`TackroomGenerator` too, and what each gives must be equal: token ids, loss
masks, logprobs, rewards, masking, the per-turn policy versions. The trials are real (local sandbox, test-script
grader); ``oracle`` solves every task (reward 1, no tokens), ``token-turns`` (a test harness, as the service's own
``sleepy``) writes an answer only ``alpha`` accepts and hands back two token turns stamped with policy versions, so
each task's tokens and reward differ. No model is called."""

from __future__ import annotations

import io
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from skyrl.train.dataset.dataset import PromptDataset
from skyrl.train.generators.utils import prepare_generator_input

import tackroom
import tackroom_app
from tackroom import ConfigError, Trajectory
from tackroom_gateway import load_tokenizer
from tackroom_train.backends import Output
from tackroom_train.cli import run_train
from tackroom_train.config import TrainConfig
from tackroom_train.dataset import write_prompt_dataset
from tackroom_train.generator import TackroomGenerator
from tackroom_train.plan import TrainPlan, resolve_plan
from tackroom_train.remote_generator import RemoteGenerator, ServiceSettings, check_service
from tackroom_train.rollout_source import rollout_generator, run_key
from tackroom_train.tinker.loop import run_tinker
from tackroom_train.tinker.rollouts import Rollouts, task_batches

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "serve" / "tests"))
from serve_testing import TOKEN, served, word_tasks  # the service's own test harness: uvicorn in this event loop

NOWHERE = "http://127.0.0.1:9/v1"  # the sampling endpoint the batches carry: no test harness calls it
ENV = "TACKROOM_SERVE_TOKEN"
OUTPUT_LISTS = ("prompt_token_ids", "response_ids", "loss_masks", "rollout_logprobs", "rewards", "stop_reasons")


# -- test plugins ------------------------------------------------------------------------------------
class TokenTurnsHarness(tackroom.Harness):
    """Writes ``one`` to /app/out.txt (only ``alpha``'s test accepts it) and hands back two token turns whose ids
    depend on the task, stamped with policy versions 7 and 8 (as a trainer's sampling endpoint stamps them)."""

    name = "token-turns"

    async def run(self, task, sandbox, policy):
        await sandbox.exec("mkdir -p /app && echo one > /app/out.txt", timeout=30)
        k = len(task.id)
        first = tackroom.TokenTurn(prompt_ids=[1, 2, k], completion_ids=[10 + k, 11], logprobs=[-0.5, -0.25],
                                   policy_version=7)
        second = tackroom.TokenTurn(prompt_ids=[1, 2, k, 10 + k, 11, 3], completion_ids=[20 + k],
                                    logprobs=[-0.125], policy_version=8)
        return tackroom.Trajectory(messages=[{"role": "user", "content": task.instruction}], turns=[first, second],
                                   token_ids=[1, 2, k, 10 + k, 11, 3, 20 + k], loss_mask=[0, 0, 0, 1, 1, 0, 1],
                                   logprobs=[0.0, 0.0, 0.0, -0.5, -0.25, 0.0, -0.125])


class LedgerOptions(tackroom.PluginOptions):
    ledger: str
    """A folder counting each task's verifications (a file per task), so each generator gets its own count."""
    failing: dict[str, int] = {}
    """Task id → how many of its first verifications fail with ``infra`` (the grading backend answered 503)."""


class LedgerVerifier(tackroom.Verifier):
    """A grader whose backend fails a task's first N verifications (``infra``), then gives 1."""

    name = "ledger-grader"
    Options = LedgerOptions

    async def verify(self, task, sandbox, trajectory):
        count = Path(self.options.ledger) / task.id
        seen = int(count.read_text()) if count.exists() else 0
        count.parent.mkdir(parents=True, exist_ok=True)
        count.write_text(str(seen + 1))
        if seen < self.options.failing.get(task.id, 0):
            raise tackroom.InfraError("the grading service answered 503")
        return tackroom.Reward(score=1.0)


class RemoteTestPlugins:
    @tackroom.hookimpl
    def tackroom_harnesses(self, register):
        register.add_harness(TokenTurnsHarness)

    @tackroom.hookimpl
    def tackroom_verifiers(self, register):
        register.add_verifier(LedgerVerifier)


@pytest.fixture
def manager() -> tackroom_app.PluginManager:
    manager = tackroom_app.PluginManager()
    manager.register(RemoteTestPlugins(), name="test:remote-rollouts")
    return manager


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    return word_tasks(tmp_path / "tasks")


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(ENV, TOKEN)
    return TOKEN


def plan_of(tasks: Path, manager: Any, **config: Any) -> TrainPlan:
    base = {"tasks": [str(tasks)], "sandbox": {"name": "local"}, "verifier": {"name": "test-script"},
            "model": {"path": "smollm2"}, "rollout": {"infra_attempts": 1}}
    return resolve_plan(TrainConfig.model_validate({**base, **config}), manager=manager)


def skyrl_input(tmp_path: Path, plan: TrainPlan, samples: int, tokenizer: Any, step: int = 0) -> dict:
    """The generator input SkyRL's trainer builds from the prompt dataset ``tackroom train`` writes."""
    dataset = PromptDataset([str(write_prompt_dataset(plan.rows, tmp_path / "prompts.jsonl"))], tokenizer,
                            max_prompt_length=2048, num_workers=0)
    prompts = dataset.collate_fn([dataset[i] for i in range(len(dataset))])
    batch, _ = prepare_generator_input(prompts, samples, {"temperature": 1.0, "max_generate_length": 8}, "tackroom",
                                       "train", step)
    return batch


def remote(plan: TrainPlan, url: str, tmp_path: Path, tokenizer: Any, run_id: str = "run-1") -> RemoteGenerator:
    settings = ServiceSettings.of(plan.rollout.rollout.model_copy(update={"service": url}), run_id=run_id)
    return RemoteGenerator(plan.rollout, service=settings, base_url=NOWHERE, tokenizer=tokenizer,
                           run_root=tmp_path / "remote", retry_backoff_sec=0.0)


def local(plan: TrainPlan, tmp_path: Path, tokenizer: Any, manager: Any) -> TackroomGenerator:
    return TackroomGenerator(plan.rollout, base_url=NOWHERE, tokenizer=tokenizer, run_root=tmp_path / "local",
                             manager=manager, retry_backoff_sec=0.0)


def turns_written(run_root: Path) -> list[str]:
    """Every token turn of the trajectories a generator wrote under ``run_root`` (each trial's ``trajectory.json``),
    sorted: the two paths number their trials differently, so the turns are compared as a whole."""
    return sorted(turn.model_dump_json() for path in run_root.glob("*/*/trajectory.json")
                  for turn in Trajectory.model_validate_json(path.read_text()).turns)


def assert_same_rows(mine: dict, theirs: dict) -> None:
    for key in OUTPUT_LISTS:
        assert mine[key] == theirs[key], key
    assert mine["trajectory_ids"] == theirs["trajectory_ids"]
    kept = ("trials", "trained_trials", "masked_trials", "mean_raw_reward", "errors_infra", "errors_model",
            "errors_task", "retried_attempts", "turn_version_min", "turn_version_max", "turns_with_version")
    for name in kept:
        key = f"tackroom/{name}"
        assert mine["rollout_metrics"].get(key) == theirs["rollout_metrics"].get(key), key


# -- one generate call, remote and local ---------------------------------------------------------------
async def test_a_generate_call_through_the_service_gives_the_local_paths_rows(tmp_path, manager, tasks, token):
    plan = plan_of(tasks, manager, harnesses=[{"name": "oracle"}, {"name": "token-turns", "label": "turns"}])
    tokenizer = load_tokenizer("smollm2")
    batch = skyrl_input(tmp_path, plan, 2, tokenizer)
    assert len(batch["prompts"]) == 12  # 3 tasks × 2 harnesses × 2 samples
    async with served(tmp_path / "svc", manager) as (_, client):
        generator = remote(plan, client.base_url, tmp_path, tokenizer)
        out = await generator.generate(batch)
        batches = await client.list_batches()
    expected = await local(plan, tmp_path, tokenizer, manager).generate(batch)

    assert_same_rows(out, expected)
    assert len(generator.batch_ids) == 2 and {b.id for b in batches} == set(generator.batch_ids)  # one per harness
    assert {b.config["harness"]["name"] for b in batches} == {"oracle", "token-turns"}
    assert all(b.config["policy"]["base_url"] == NOWHERE for b in batches), "the batch carries the sampling endpoint"
    for i, extras in enumerate(batch["env_extras"]):
        if extras["harness"] == "oracle":  # reward 1 and no tokens: a fully masked placeholder row
            assert out["rewards"][i] == 1.0 and not any(out["loss_masks"][i])
        else:  # the turns' ids after the first generated token; only alpha's test takes "one"
            k = len(extras["task_id"])
            assert out["response_ids"][i] == [10 + k, 11, 3, 20 + k] and out["loss_masks"][i] == [1, 1, 0, 1]
            assert out["rewards"][i] == (1.0 if extras["task_id"] == "alpha" else 0.0)
    assert out["rollout_metrics"]["tackroom/turn_version_min"] == 7
    assert out["rollout_metrics"]["tackroom/turn_version_max"] == 8
    # the local copies keep each turn's ids and policy version, as the local path's run folder does
    written = turns_written(tmp_path / "remote")
    assert len(written) == 12 and written == turns_written(tmp_path / "local")  # 6 token-turns trials × 2 turns


async def test_infra_failures_are_retried_by_the_service_then_dropped_as_the_local_path_drops_them(
        tmp_path, manager, tasks, token):
    # alpha's grader fails once (the service's second attempt passes), beta's always (dropped after 2 attempts)
    def verifier(name: str) -> dict:
        return {"name": "ledger-grader", "ledger": str(tmp_path / name), "failing": {"alpha": 1, "beta": 99}}

    tokenizer = load_tokenizer("smollm2")
    remote_plan = plan_of(tasks, manager, harness={"name": "token-turns"}, verifier=verifier("remote-ledger"),
                          rollout={"infra_attempts": 2})
    local_plan = plan_of(tasks, manager, harness={"name": "token-turns"}, verifier=verifier("local-ledger"),
                         rollout={"infra_attempts": 2})
    batch = skyrl_input(tmp_path, remote_plan, 1, tokenizer)
    async with served(tmp_path / "svc", manager) as (_, client):
        generator = remote(remote_plan, client.base_url, tmp_path, tokenizer)
        out = await generator.generate(batch)
        (view,) = await client.list_batches()
    expected = await local(local_plan, tmp_path, tokenizer, manager).generate(batch)

    assert_same_rows(out, expected)
    by_task = {e["task_id"]: i for i, e in enumerate(batch["env_extras"])}
    assert not any(out["loss_masks"][by_task["beta"]]), "an infra failure after its attempts trains nothing"
    assert any(out["loss_masks"][by_task["alpha"]]) and out["rewards"][by_task["alpha"]] == 1.0
    metrics = out["rollout_metrics"]
    assert metrics["tackroom/errors_infra"] == 1 and metrics["tackroom/retried_attempts"] == 2  # alpha 1, beta 1
    assert view.counts["failed"] == 1 and view.counts["completed"] == 2
    assert (tmp_path / "remote-ledger" / "beta").read_text() == "2", "the service tried beta infra_attempts times"


# -- idempotency --------------------------------------------------------------------------------------
async def test_a_restarted_trainer_reattaches_to_the_steps_batch(tmp_path, manager, tasks, token):
    plan = plan_of(tasks, manager, harness={"name": "token-turns"})
    tokenizer = load_tokenizer("smollm2")
    batch = skyrl_input(tmp_path, plan, 1, tokenizer, step=3)
    async with served(tmp_path / "svc", manager) as (_, client):
        first = remote(plan, client.base_url, tmp_path, tokenizer)
        out = await first.generate(batch)
        restarted = remote(plan, client.base_url, tmp_path, tokenizer)  # a new process, the same --run-id
        again = await restarted.generate(batch)
        assert restarted.batch_ids == first.batch_ids
        assert len(await client.list_batches()) == 1, "no second batch for the same step"
        # the same groups drawn again in one step (a resample round) are a batch of their own, and so are another
        # run's, and those of a trainer restarted with its sampling endpoint elsewhere (the old batch's rollouts
        # would call an endpoint that is gone)
        await restarted.generate(batch)
        await remote(plan, client.base_url, tmp_path, tokenizer, run_id="run-2").generate(batch)
        moved = remote(plan, client.base_url, tmp_path, tokenizer)
        moved.policy_url = "http://127.0.0.1:10/v1"
        await moved.generate(batch)
        assert len(await client.list_batches()) == 4
    assert_same_rows(again, out)
    assert restarted.batch_ids[1] != restarted.batch_ids[0] and moved.batch_ids[0] not in restarted.batch_ids


def test_a_runs_key_is_its_folder_so_a_restart_meets_it_and_two_arms_do_not_share_it(tmp_path):
    assert run_key(tmp_path / "ablation" / "arms" / "dppo") == run_key(tmp_path / "ablation" / "arms" / "dppo")
    assert run_key(tmp_path / "ablation" / "arms" / "dppo") != run_key(tmp_path / "again" / "arms" / "dppo")
    assert run_key(tmp_path / "overfit").startswith("overfit-")


# -- task paths -----------------------------------------------------------------------------------------
async def test_tasks_go_relative_to_the_mirrored_root_and_one_the_service_cannot_load_is_refused(
        tmp_path, manager, tasks, token):
    plan = plan_of(tasks, manager, harness={"name": "oracle"},
                   rollout={"infra_attempts": 1, "service_tasks_root": str(tmp_path)})
    batch = skyrl_input(tmp_path, plan, 1, load_tokenizer("smollm2"))
    mirror = tmp_path / "elsewhere"  # the service's copy of the tasks, under its own --tasks-root
    shutil.copytree(tasks, mirror / "tasks")
    async with served(tmp_path / "svc", manager, tasks_root=mirror) as (_, client):
        out = await remote(plan, client.base_url, tmp_path, None).generate(batch)
        (view,) = await client.list_batches()
        # sent as tasks/alpha ...: the service resolved them against its own root, not the trainer's paths
        assert sorted(view.config["tasks"]) == [str((mirror / "tasks" / t).resolve()) for t in ("alpha", "beta", "gamma")]
        assert all(Path(r.task_path).is_relative_to(mirror) for r in await client.list_rollouts(view.id))
        assert out["rewards"] == [1.0, 1.0, 1.0]
        (mirror / "tasks" / "beta" / "task.toml").write_text("not = [toml")  # the service's copy breaks
        with pytest.raises(ConfigError, match="could not load tasks the trainer trains on .*beta"):
            await remote(plan, client.base_url, tmp_path, None, run_id="run-2").generate(batch)
        latest = (await client.list_batches())[0]
        assert latest.id != view.id and latest.state == "cancelled", "its other tasks do not run for nothing"


# -- errors -------------------------------------------------------------------------------------------
async def test_a_service_that_is_down_or_refuses_the_token_is_a_config_error_naming_it(
        tmp_path, manager, tasks, token, monkeypatch):
    plan = plan_of(tasks, manager, harness={"name": "oracle"})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{s.getsockname()[1]}"
    batch = skyrl_input(tmp_path, plan, 1, load_tokenizer("smollm2"))
    with pytest.raises(ConfigError, match=f"no tackroom serve answers at {down}"):
        await remote(plan, down, tmp_path, None).generate(batch)
    async with served(tmp_path / "svc", manager) as (_, client):
        monkeypatch.setenv(ENV, "wrong-token-" + "z" * 24)
        settings = ServiceSettings.of(plan.rollout.rollout.model_copy(update={"service": client.base_url}),
                                      run_id="r")
        with pytest.raises(ConfigError, match=f"the rollout service at {client.base_url} refused the token "
                                              f"from \\${ENV}"):
            await check_service(settings)
        with pytest.raises(ConfigError, match="refused the token"):
            await remote(plan, client.base_url, tmp_path, None).generate(batch)
        assert await client.list_batches() == []
    monkeypatch.delenv(ENV)
    with pytest.raises(ConfigError, match=f"token is read from \\${ENV}, which is not set"):
        rollout_generator(plan.rollout.model_copy(update={"rollout": plan.rollout.rollout.model_copy(
            update={"service": down})}), run_id="r", phase="train", base_url=NOWHERE)


async def test_the_tinker_loop_refuses_a_dead_service_before_starting_anything(tmp_path, manager, tasks, token):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{s.getsockname()[1]}"
    config = TrainConfig.model_validate({
        "tasks": [str(tasks)], "backend": "tinker", "model": {"path": "smollm2"}, "harness": {"name": "oracle"},
        "sandbox": {"name": "local"}, "rollout": {"service": down},
        # a Tinker server "given" at a dead port and its own sampler: were the check missing, nothing would start here
        "tinker": {"url": down, "sampler": "tinker"}})
    log: list[str] = []
    with pytest.raises(ConfigError, match=f"no tackroom serve answers at {down}"):
        await run_tinker(config, tmp_path / "run", manager=manager, log=log.append)
    assert log == [], "refused before anything started"


# -- the Tinker loop's rollout phase ---------------------------------------------------------------------
class PinnedSampler:
    """The sampler's side of a rollout phase (its pin and its check); the harnesses here call no model."""

    base_url = NOWHERE

    def __init__(self) -> None:
        self.pinned: list[int] = []

    def pin(self, version: int) -> None:
        self.pinned.append(version)

    async def check(self, what: str) -> None:
        return None


async def test_one_tinker_rollout_phase_through_the_service(tmp_path, manager, tasks, token):
    plan = plan_of(tasks, manager, harness={"name": "token-turns"})
    tokenizer = load_tokenizer("smollm2")
    async with served(tmp_path / "svc", manager) as (_, client):
        generator = rollout_generator(plan.rollout.model_copy(update={"rollout": plan.rollout.rollout.model_copy(
            update={"service": client.base_url})}), run_id="tinker-run", phase="train", base_url=NOWHERE,
            tokenizer=tokenizer, run_root=tmp_path / "rollouts")
        assert isinstance(generator, RemoteGenerator)
        sampler = PinnedSampler()
        rollouts = Rollouts(generator, sampler, task_batches(plan.rows, 2, seed=1), samples_per_prompt=2,  # type: ignore[arg-type]
                            temperature=1.0, max_generate_length=8)
        drawn = await rollouts(1, 4)  # step 1 samples with policy version 4
        (view,) = await client.list_batches()
        outcomes = [o async for o in client.results(view.id, trajectory=False)]
    assert sampler.pinned == [4] and view.policy_version == 4
    assert {o.policy_version for o in outcomes} == {4}, "each rollout records the version the step sampled with"
    assert view.idempotency_key.startswith("tackroom-train/tinker-run/train/step00001/")
    assert len(drawn.ids) == 4 and len(drawn.group_rows()) == 2  # 2 tasks × 2 samples, a group per task
    for i, task in enumerate(drawn.task_ids):
        k = len(task)
        assert drawn.output["response_ids"][i] == [10 + k, 11, 3, 20 + k]
        assert drawn.output["rewards"][i] == (1.0 if task == "alpha" else 0.0)
    assert drawn.output["rollout_metrics"]["tackroom/turn_version_max"] == 8


def test_rollouts_flag_names_the_service_in_the_plan(tmp_path, tasks, token):
    config = tmp_path / "train.toml"
    config.write_text(f'tasks = ["{tasks}"]\n[harness]\nname = "oracle"\n[sandbox]\nname = "local"\n'
                      '[model]\npath = "smollm2"\n[rollout]\nout = "' + str(tmp_path / "runs") + '"\n')
    text = io.StringIO()
    out = Output(Console(file=text, width=200), Console(file=io.StringIO()))
    assert run_train(config, out, backend="tinker", dry_run=True, rollouts="http://10.0.0.7:8300") == 0
    assert "rollouts: the tackroom serve at http://10.0.0.7:8300 runs the trials (token from $TACKROOM_SERVE_TOKEN)" \
        in text.getvalue()  # a dry run maps the config and contacts nothing


def test_a_dry_run_leaves_no_run_folder_and_never_touches_a_named_runs_files(tmp_path, tasks):
    """A dry run maps the config in a scratch folder: no new folder under ``[rollout] out``, and the prompts of an
    existing run that shares its ``--run-id`` stay as they were."""
    runs = tmp_path / "runs"
    config = tmp_path / "train.toml"
    config.write_text(f'tasks = ["{tasks}"]\n[harness]\nname = "oracle"\n[sandbox]\nname = "local"\n'
                      f'[model]\npath = "smollm2"\n[rollout]\nout = "{runs}"\n')
    (runs / "kept").mkdir(parents=True)
    (runs / "kept" / "prompts.jsonl").write_text("the run's own prompts\n")
    text = io.StringIO()
    out = Output(Console(file=text, width=200), Console(file=io.StringIO()))
    assert run_train(config, out, backend="tinker", dry_run=True) == 0
    assert run_train(config, out, backend="tinker", dry_run=True, run_id="kept") == 0
    assert sorted(p.name for p in runs.iterdir()) == ["kept"]
    assert (runs / "kept" / "prompts.jsonl").read_text() == "the run's own prompts\n"
    assert "(a dry run: nothing is kept)" in text.getvalue()
