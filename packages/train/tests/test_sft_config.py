"""``[sft]`` read and resolved before anything starts: wrong keys list the right ones, a missing or empty dataset
and demonstrations of another tokenizer are refused with the fix, ``max_length`` truncates (and drops what has no
trained token left), an SFT-only run needs no tasks, ``[model] init_from`` finds the earlier run's policy, and
the epochs' batches. The skyrl backend's mapping onto SkyRL 0.4's own SFT trainer, checked by SkyRL's ``SFTConfig``.
No server: the warm start against the real one is test_sft_tinker.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tackroom import ConfigError
from tackroom_train.config import load_train_config
from tackroom_train.demonstrations import Demonstration, write_jsonl
from tackroom_train.plan import resolve_plan
from tackroom_train.sft import epoch_batches

TASKS = Path(__file__).resolve().parents[3] / "examples" / "train" / "overfit-tasks"


def demo(ids: list[int], mask: list[int], *, split: str = "train", tokenizer: str = "smollm2",
         task: str = "t") -> Demonstration:
    return Demonstration(task_id=task, harness="answer", reward=1.0, input_ids=ids, loss_mask=mask,
                         tokenizer=tokenizer, split=split)


ROWS = [demo([1, 2, 3, 4, 5], [0, 0, 1, 1, 1]), demo([1, 2, 6, 7], [0, 0, 1, 1]),
        demo([1, 2, 3, 9, 9, 9], [0, 0, 0, 1, 0, 1]), demo([1, 8, 8], [0, 1, 1], split="eval")]


def write_config(tmp_path: Path, sft: str, *, extra: str = "", rows: list[Demonstration] | None = None,
                 tasks: bool = False) -> Path:
    """A train config beside a demonstrations file (``demos.jsonl``, relative to the config)."""
    write_jsonl(tmp_path / "data" / "demos.jsonl", ROWS if rows is None else rows)
    head = f"tasks = [{json.dumps(str(TASKS))}]\n" if tasks else ""
    text = (f"{head}backend = \"tinker\"\n[model]\npath = \"smollm2\"\n{extra}\n"
            f"[sft]\ndataset = \"data/demos.jsonl\"\n{sft}\n")
    path = tmp_path / "train.toml"
    path.write_text(text)
    return path


def plan_of(path: Path, **kwargs: Any) -> Any:
    return resolve_plan(load_train_config(path), **kwargs)


def test_an_unknown_sft_key_is_refused_with_the_keys_that_exist(tmp_path: Path) -> None:
    path = write_config(tmp_path, "then_rl = false\nlr = 1e-4")
    with pytest.raises(ConfigError) as err:
        load_train_config(path)
    assert "sft.lr: unknown field" in str(err.value)
    assert ("valid fields of sft: batch_size, dataset, epochs, harnesses, learning_rate, max_length, skyrl, then_rl"
            in str(err.value))
    path.write_text(path.read_text().replace("[model]\npath", "[model]\nstart_from = \"x\"\npath"))
    with pytest.raises(ConfigError, match="model.start_from: unknown field(.|\n)*valid fields of model: init_from"):
        load_train_config(path)


def test_a_missing_dataset_is_refused_naming_the_resolved_path(tmp_path: Path) -> None:
    path = write_config(tmp_path, "then_rl = false")
    (tmp_path / "data" / "demos.jsonl").unlink()
    with pytest.raises(ConfigError, match=f"sft.dataset: no such file: {tmp_path}/data/demos.jsonl .*relative path "
                                          "resolves against the config file's folder"):
        plan_of(path)


def test_demonstrations_of_another_tokenizer_are_refused_naming_both(tmp_path: Path) -> None:
    rows = [*ROWS, demo([1, 2, 3], [0, 1, 1], tokenizer="Qwen/Qwen3-8B")]
    path = write_config(tmp_path, "then_rl = false", rows=rows)
    with pytest.raises(ConfigError, match="1 demonstration\\(s\\) were tokenized with 'Qwen/Qwen3-8B', this run's "
                                          "tokenizer is 'smollm2'"):
        plan_of(path)


def test_the_same_tokenizer_under_another_name_is_accepted(tmp_path: Path) -> None:
    from tackroom_gateway.tokenizers import tokenizer_dir

    folder = str(tokenizer_dir("smollm2"))  # the folder "smollm2" names: the same tokenizer.json
    path = write_config(tmp_path, "then_rl = false", rows=[demo(r.input_ids, r.loss_mask, split=r.split,
                                                                 tokenizer=folder) for r in ROWS])
    assert plan_of(path).sft.tokenizer == "smollm2"


@pytest.mark.parametrize("rows,why", [
    ([], "no rows"),
    ([demo([1, 8, 8], [0, 1, 1], split="eval")], "1 row\\(s\\), 1 held out"),
    ([demo([1, 8], [1, 0])], "1 row\\(s\\), 0 held out .*, 1 without a trained token"),  # only the first: untrainable
])
def test_a_dataset_with_nothing_to_train_on_is_refused(tmp_path: Path, rows: list, why: str) -> None:
    path = write_config(tmp_path, "then_rl = false", rows=rows)
    with pytest.raises(ConfigError, match=f"nothing to train on \\({why}"):
        plan_of(path)


def test_max_length_truncates_and_drops_rows_without_a_trained_token_left(tmp_path: Path) -> None:
    sft = plan_of(write_config(tmp_path, "then_rl = false\nmax_length = 4")).sft
    assert [ex.ids for ex in sft.train] == [[1, 2, 3, 4], [1, 2, 6, 7], [1, 2, 3, 9]]
    assert [ex.mask for ex in sft.train] == [[0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1]]
    assert (sft.truncated, sft.dropped) == (2, 0)
    sft = plan_of(write_config(tmp_path, "then_rl = false\nmax_length = 3")).sft
    assert [ex.ids for ex in sft.train] == [[1, 2, 3], [1, 2, 6]]  # the third's trained tokens all lay beyond
    assert (sft.truncated, sft.dropped, [ex.trained_tokens for ex in sft.train]) == (2, 1, [1, 1])
    assert "2 cut to 3 tokens, 1 dropped (no trained token left)" in sft.describe()
    untouched = plan_of(write_config(tmp_path, "then_rl = false")).sft
    assert [len(ex.ids) for ex in untouched.train] == [5, 4, 6] and untouched.truncated == 0
    assert [ex.ids for ex in untouched.held_out] == [[1, 8, 8]]


def test_a_warm_start_alone_needs_no_tasks_and_rl_still_does(tmp_path: Path) -> None:
    plan = plan_of(write_config(tmp_path, "then_rl = false"))
    assert plan.rows == [] and not plan.rl and plan.sft.steps_total == 1
    with pytest.raises(ConfigError, match="tasks: no tasks given.*needs none"):
        load_train_config(write_config(tmp_path, "then_rl = true"))
    plan = plan_of(write_config(tmp_path, "epochs = 2\nbatch_size = 2", tasks=True))
    assert plan.rl and len(plan.rows) == 3 and plan.sft.steps_per_epoch == 2 and plan.sft.steps_total == 4


def test_init_from_finds_the_earlier_runs_policy(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "warm"
    path = write_config(tmp_path, "then_rl = false", extra="init_from = \"runs/warm\"")
    with pytest.raises(ConfigError, match="model.init_from: .*runs/warm holds no policy"):
        plan_of(path)
    (run / "policy").mkdir(parents=True)
    (run / "policy" / "config.json").write_text("{}")
    assert plan_of(path).start_from == (run / "policy").resolve()
    both = write_config(tmp_path, "then_rl = false", extra="init_from = \"runs/warm/policy\"\n[tinker]\n"
                                                            "base_model = \"smollm2\"")
    with pytest.raises(ConfigError, match="model.init_from and tinker.base_model both"):
        plan_of(both)


def test_each_epoch_trains_every_row_once_in_a_seeded_order(tmp_path: Path) -> None:
    rows = [demo([1, k, k], [0, 1, 1], task=f"t{k}") for k in range(2, 9)]
    sft = plan_of(write_config(tmp_path, "then_rl = false\nbatch_size = 3", rows=rows)).sft
    first = epoch_batches(sft, 0, seed=42)
    assert [len(b) for b in first] == [3, 3, 1] == [len(b) for b in epoch_batches(sft, 1, seed=42)]
    assert sorted(ex.task_id for b in first for ex in b) == sorted(f"t{k}" for k in range(2, 9))
    assert first == epoch_batches(sft, 0, seed=42) != epoch_batches(sft, 1, seed=42)


def test_raw_skyrl_sft_overrides_are_refused_on_the_tinker_backend(tmp_path: Path) -> None:
    from tackroom_train.tinker.loop import RunScope, train_on_tinker

    plan = plan_of(write_config(tmp_path, "then_rl = false\n[sft.skyrl]\nmicro_train_batch_size_per_gpu = 4"))
    with pytest.raises(ConfigError, match="sft.skyrl: raw overrides of SkyRL's SFTConfig apply on the skyrl backend"):
        asyncio.run(train_on_tinker(plan, RunScope(tmp_path / "run")))


# -- the skyrl backend: SkyRL 0.4's SFT trainer --------------------------------------------------------------


def skyrl_backend(path: Path, run_dir: Path) -> Any:
    from tackroom_train.launch import SkyrlBackend

    return SkyrlBackend(plan_of(path, backend="skyrl"), run_dir, run_dir / "prompts.jsonl")


def test_sft_maps_onto_skyrls_own_sft_config(tmp_path: Path) -> None:
    from skyrl.train.config.sft_config import SFTConfig, build_skyrl_config_for_sft

    from tackroom_train.skyrl_sft import build_sft_config, sft_command

    path = write_config(tmp_path, "epochs = 2\nbatch_size = 8\nlearning_rate = 1e-5\nmax_length = 4096",
                        extra="[gpus]\ntrain = 4\ninference = 4", tasks=True)
    run = tmp_path / "run"
    backend = skyrl_backend(path, run)
    o = backend.view.sft_overrides
    cfg = build_sft_config(o)
    assert isinstance(cfg, SFTConfig)
    assert cfg.pretokenized_dataset_paths == [str(run / "sft" / "train.jsonl")] and cfg.train_datasets is None
    assert cfg.eval_pretokenized_dataset_paths == [str(run / "sft" / "eval.jsonl")] and cfg.eval_before_train
    assert (cfg.num_epochs, cfg.batch_size, cfg.optimizer_config.lr, cfg.max_length) == (2, 8, 1e-5, 4096)
    assert (cfg.model.path, cfg.strategy, cfg.placement.num_gpus_per_node, cfg.seed) == ("smollm2", "fsdp", 4, 42)
    assert (cfg.hf_save_interval, cfg.export_path) == (2, str(run / "sft" / "export"))  # 2 epochs × 1 step: once
    assert build_skyrl_config_for_sft(cfg).trainer.policy.optimizer_config.lr == 1e-5
    # the command line SkyRL's entry point parses is the same config
    assert SFTConfig.from_cli_overrides(sft_command(o)[3:]) == SFTConfig.from_cli_overrides(o)
    # RL starts from what the SFT trainer exports at its last step
    assert backend.view.overrides["trainer.policy.model.path"] == str(run / "sft" / "export" / "global_step_2" / "policy")
    lines = backend.dry_run(load_train_config(path))
    assert "SkyRL SFT overrides (skyrl.train.main_sft):" in lines and "SkyRL overrides:" in lines


def test_a_warm_start_alone_on_skyrl_maps_no_rl(tmp_path: Path) -> None:
    backend = skyrl_backend(write_config(tmp_path, "then_rl = false\nbatch_size = 8"), tmp_path / "run")
    assert backend.view.overrides == {} and backend.view.sft_overrides["model.path"] == "smollm2"
    assert "then " + str(tmp_path / "run" / "policy") in backend.describe()[-1]


def test_skyrl_sft_refusals_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="sft.batch_size = 6: SkyRL's FSDP SFT needs a multiple of .* \\(4 × 2 = 8\\)"):
        skyrl_backend(write_config(tmp_path, "then_rl = false\nbatch_size = 6", extra="[gpus]\ntrain = 4"),
                      tmp_path / "run")
    backend = skyrl_backend(write_config(tmp_path, "then_rl = false\nbatch_size = 6\n[sft.skyrl]\n"
                                                   "micro_train_batch_size_per_gpu = 1\nbogus = 1",
                                         extra="[gpus]\ntrain = 2"), tmp_path / "run")
    with pytest.raises(ConfigError, match="SkyRL rejected the mapped SFT config.*Invalid fields \\{'bogus'\\}.*"
                                          "Valid fields are"):
        backend.dry_run(load_train_config(tmp_path / "train.toml"))


def test_the_example_reads_the_dataset_tackroom_collect_writes() -> None:
    root = TASKS.parents[2]
    config = load_train_config(root / "examples" / "train" / "sft.toml")
    assert config.sft.dataset == str(root / "runs" / "collect" / "overfit" / "demonstrations.jsonl")
    assert (config.sft.epochs, config.sft.batch_size, config.sft.max_length, config.sft.then_rl) == (2, 4, 1024, True)
    assert config.backend == "tinker" and config.model.tokenizer == "smollm2" and len(config.tasks) == 1


def test_harnesses_keeps_the_rows_collected_under_them_and_names_a_missing_one(tmp_path: Path) -> None:
    rows = [*ROWS, demo([1, 5, 5], [0, 1, 1]).model_copy(update={"harness": "terminus"})]
    both = plan_of(write_config(tmp_path, "then_rl = false", rows=rows)).sft
    assert len(both.train) == 4
    one = plan_of(write_config(tmp_path, 'then_rl = false\nharnesses = ["terminus"]', rows=rows)).sft
    assert [ex.ids for ex in one.train] == [[1, 5, 5]] and one.held_out == []
    with pytest.raises(ConfigError, match=r"sft.harnesses: no row .* under 'opencode'; its rows' harnesses: answer, "
                                          r"terminus"):
        plan_of(write_config(tmp_path, 'then_rl = false\nharnesses = ["opencode"]', rows=rows))
