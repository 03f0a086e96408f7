"""`tackroom train` config → SkyRL config, field by field; the derived ceilings; early failure without GPUs."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tackroom import ConfigError
from tackroom_app import PluginNotFoundError
from tackroom_train.ceilings import derive_ceilings
from tackroom_train.config import load_train_config
from tackroom_train.plan import resolve_plan
from tackroom_train.preflight import GpuRequirementError, Machine, check_machine
from tackroom_train.skyrl_config import build_skyrl_config, skyrl_overrides

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"

CONFIG = """
tasks = ["{tasks}"]
[harness]
name = "terminus"
max_turns = 3
[sandbox]
name = "local"
[verifier]
name = "test-script"
[loss]
name = "dppo"
aggregation = "prompt_mean"
options = {{ divergence = "binary_kl", delta_low = 0.1, delta_high = 0.3 }}
[model]
path = "Qwen/Qwen3-8B"
served_name = "policy"
[train]
max_staleness_steps = 3
mini_batch_size = 8
samples_per_prompt = 4
learning_rate = 2e-6
max_training_steps = 50
temperature = 0.9
max_generate_length = 2048
max_prompt_length = 1024
[gpus]
inference = 4
train = 2
tensor_parallel_size = 2
kv_cache_tokens_per_engine = 400000
context_length = 16384
[rollout]
infra_attempts = 2
[skyrl]
"trainer.algorithm.grpo_norm_by_std" = false
"""


def ceilings_of(config):
    return derive_ceilings(config.train, config.gpus, config.rollout.max_concurrency)


@pytest.fixture
def config_path(tmp_path):
    p = tmp_path / "train.toml"
    p.write_text(CONFIG.format(tasks=EXAMPLES / "tasks"))
    return p


def test_every_mapped_field(config_path, tmp_path):
    config = load_train_config(config_path)
    o = skyrl_overrides(resolve_plan(config), dataset_path=tmp_path / "prompts.jsonl", run_dir=tmp_path / "run")
    expected = {
        "data.train_data": [str(tmp_path / "prompts.jsonl")],
        "data.val_data": [],
        "environment.env_class": "tackroom",
        "trainer.policy.model.path": "Qwen/Qwen3-8B",
        "trainer.policy.optimizer_config.lr": 2e-6,
        "trainer.strategy": "fsdp",
        "trainer.seed": 42,
        "trainer.fully_async.enabled": True,
        "trainer.fully_async.max_staleness_steps": 3,
        # KV: 2 engines × 400000 // 16384 = 48 trials = 12 groups of 4; staleness: 4 × 8 × 4 = 128 trials
        "trainer.fully_async.num_parallel_generation_workers": 12,
        "trainer.policy_mini_batch_size": 8,
        "trainer.train_batch_size": 8,
        "generator.n_samples_per_prompt": 4,
        "trainer.algorithm.policy_loss_type": "tackroom_dppo",
        "trainer.algorithm.loss_reduction": "prompt_mean",
        "trainer.algorithm.advantage_estimator": "grpo",
        "trainer.algorithm.use_kl_loss": False,
        "trainer.placement.colocate_all": False,
        "trainer.placement.policy_num_nodes": 1,
        "trainer.placement.policy_num_gpus_per_node": 2,
        "generator.inference_engine.num_engines": 2,
        "generator.inference_engine.tensor_parallel_size": 2,
        "generator.inference_engine.gpu_memory_utilization": 0.85,
        "generator.inference_engine.max_num_seqs": 24,
        "generator.inference_engine.served_model_name": "policy",
        "generator.sampling_params.temperature": 0.9,
        "generator.sampling_params.max_generate_length": 2048,
        "generator.sampling_params.logprobs": 1,
        "trainer.max_prompt_length": 1024,
        "trainer.epochs": 1,
        "trainer.max_training_steps": 50,
        "trainer.eval_interval": -1,
        "trainer.eval_before_train": False,
        "trainer.logger": "console",
        "trainer.run_name": "tackroom",
        "trainer.project_name": "tackroom",
        "trainer.ckpt_path": str(tmp_path / "run" / "ckpts"),
        "trainer.export_path": str(tmp_path / "run" / "exports"),
        "trainer.log_path": str(tmp_path / "run" / "logs"),
        # [loss.options] through the options class's skyrl_fields
        "trainer.algorithm.dppo.dppo_type": "binary_kl",
        "trainer.algorithm.dppo.delta_low": 0.1,
        "trainer.algorithm.dppo.delta_high": 0.3,
        # [skyrl] raw overrides, last
        "trainer.algorithm.grpo_norm_by_std": False,
    }
    assert o == expected


def test_skyrl_accepts_the_mapping_and_types_it(config_path, tmp_path):
    config = load_train_config(config_path)
    cfg = build_skyrl_config(skyrl_overrides(resolve_plan(config), dataset_path=tmp_path / "p.jsonl", run_dir=tmp_path))
    t, g = cfg.trainer, cfg.generator
    assert t.fully_async.enabled and t.fully_async.max_staleness_steps == 3
    assert t.fully_async.num_parallel_generation_workers == 12 and t.policy_mini_batch_size == 8
    assert t.algorithm.policy_loss_type == "tackroom_dppo" and t.algorithm.loss_reduction == "prompt_mean"
    assert t.algorithm.dppo.dppo_type == "binary_kl" and t.algorithm.dppo.delta_high == 0.3
    assert t.algorithm.grpo_norm_by_std is False
    assert g.n_samples_per_prompt == 4 and g.inference_engine.num_engines == 2
    assert g.sampling_params.logprobs == 1 and t.placement.colocate_all is False
    assert cfg.data.train_data == [str(tmp_path / "p.jsonl")]
    # the fully-async trainer's own invariant holds for the derived worker count
    workers = t.fully_async.num_parallel_generation_workers
    assert t.policy_mini_batch_size <= workers <= t.policy_mini_batch_size * (t.fully_async.max_staleness_steps + 1)


def test_a_bad_skyrl_override_is_a_config_error(config_path, tmp_path):
    config = load_train_config(config_path)
    config.skyrl["trainer.no_such_field"] = 1
    with pytest.raises(ConfigError, match="SkyRL rejected"):
        build_skyrl_config(skyrl_overrides(resolve_plan(config), dataset_path=tmp_path / "p.jsonl", run_dir=tmp_path))


def test_ceilings_staleness_kv_and_cap(config_path):
    config = load_train_config(config_path)
    c = ceilings_of(config)
    assert (c.num_engines, c.staleness_ceiling, c.kv_cache_ceiling) == (2, 128, 48)
    assert (c.rollout_concurrency, c.bound_by, c.generation_workers) == (48, "kv_cache", 12)
    config.gpus.kv_cache_tokens_per_engine = None
    c = ceilings_of(config)
    assert (c.rollout_concurrency, c.bound_by, c.generation_workers) == (128, "staleness", 32)
    config.rollout.max_concurrency = 40
    c = ceilings_of(config)
    assert (c.rollout_concurrency, c.bound_by, c.generation_workers) == (40, "rollout.max_concurrency", 10)
    config.rollout.max_concurrency = 8  # 2 groups < one mini-batch of 8: SkyRL's floor, with a warning
    c = ceilings_of(config)
    assert c.generation_workers == 8 and "fewer than one mini-batch" in c.warnings[0]


def test_unknown_loss_lists_the_installed_ones(config_path, tmp_path):
    config = load_train_config(config_path)
    config.loss.name = "nope"
    with pytest.raises(PluginNotFoundError, match="loss.name: no loss named 'nope'.*dppo"):
        skyrl_overrides(resolve_plan(config), dataset_path=tmp_path / "p.jsonl", run_dir=tmp_path)


def test_bad_fields_name_the_dotted_path(tmp_path):
    p = tmp_path / "t.toml"
    p.write_text('tasks = ["x"]\n[model]\npath = "m"\n[train]\nmini_batch = 3\n[gpus]\ninference = 3\ntensor_parallel_size = 2\n')
    with pytest.raises(ConfigError) as err:
        load_train_config(p)
    assert "train.mini_batch: unknown field" in str(err.value)
    assert "gpus" in str(err.value) and "multiple of tensor_parallel_size" in str(err.value)


@pytest.mark.parametrize("machine, problem", [
    (Machine(gpus=0, vllm=False, skyrl=True), "no NVIDIA GPU"),
    (Machine(gpus=4, vllm=True, skyrl=True), "asks for 4 inference + 2 train GPUs, this node has 4"),
    (Machine(gpus=8, vllm=False, skyrl=True), "vllm is not importable"),
])
def test_preflight_refuses_with_the_fix(config_path, machine, problem):
    with pytest.raises(GpuRequirementError, match=re.escape(problem)) as err:
        check_machine(load_train_config(config_path).gpus, machine)
    assert "--dry-run" in str(err.value)


def test_preflight_passes_a_gpu_node(config_path):
    assert check_machine(load_train_config(config_path).gpus, Machine(gpus=8, vllm=True, skyrl=True)).gpus == 8


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tackroom_app", "train", *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)


def test_cli_on_this_machine_prints_ceilings_then_fails_early(config_path, tmp_path):
    config = config_path.read_text().replace("[rollout]", f'[rollout]\nout = "{tmp_path}"')
    config_path.write_text(config)
    out = run_cli(str(config_path), "--run-id", "cpu")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "rollout concurrency        48  (bound by kv_cache)" in out.stdout
    stderr = " ".join(out.stderr.split())  # rich wraps lines
    assert "needs NVIDIA GPUs and vLLM: no NVIDIA GPU" in stderr and "lower [gpus]" in stderr
    rows = [json.loads(line) for line in (tmp_path / "cpu" / "prompts.jsonl").read_text().splitlines()]
    assert {r["task_id"] for r in rows} >= {"hello-file", "csv-totals"}
    assert all(r["env_class"] == "tackroom" and Path(r["task_path"]).is_dir() for r in rows)
    assert rows[0]["prompt"][0]["role"] == "user"


@pytest.mark.parametrize("name", ["qwen35-35b-a3b", "qwen35-397b-a17b"])
def test_example_configs_map_onto_skyrl(name, tmp_path):
    config = load_train_config(EXAMPLES / "train" / f"{name}.toml")
    assert (config.loss.name, config.loss.aggregation) == ("dppo", "prompt_mean")
    assert config.harness.options["budget_nudge_ratio"] == 0.2
    o = skyrl_overrides(resolve_plan(config), dataset_path=tmp_path / "p.jsonl", run_dir=tmp_path)
    cfg = build_skyrl_config(o)
    assert cfg.trainer.algorithm.dppo.delta_low == 0.15 and cfg.trainer.fully_async.enabled
    assert ceilings_of(config).warnings == []


def test_overfit_example_maps_onto_one_gpu_pair(tmp_path):
    config = load_train_config(EXAMPLES / "train" / "overfit.toml")
    assert len(config.tasks) == 1 and Path(config.tasks[0]).name == "overfit-tasks"
    o = skyrl_overrides(resolve_plan(config), dataset_path=tmp_path / "p.jsonl", run_dir=tmp_path)
    assert o["generator.inference_engine.num_engines"] == 1 and o["trainer.placement.policy_num_gpus_per_node"] == 1
    assert o["trainer.fully_async.num_parallel_generation_workers"] == 6  # (1 + 1) × 3 groups
    build_skyrl_config(o)


def test_rollout_network_sets_the_network_of_tasks_that_declare_none(config_path):
    assert not load_train_config(config_path).rollout.network.grading.online  # offline by default
    text = config_path.read_text().replace("infra_attempts = 2\n", 'infra_attempts = 2\nnetwork = {agent = "none", '
                                                                 'grading = "public"}\n')
    config_path.write_text(text)
    network = load_train_config(config_path).rollout.network
    assert (network.agent.mode, network.grading.mode) == ("none", "public")
    config_path.write_text(text.replace('grading = "public"', 'grading = "internet"'))
    with pytest.raises(ConfigError, match="rollout.network.grading.mode"):
        load_train_config(config_path)
