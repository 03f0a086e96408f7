"""``tackroom train CONFIG.toml``: one TOML for the rollout (harness, sandbox, verifier), the loss and SkyRL's knobs.

```toml
tasks = ["../tasks"]
[harness]            # any tackroom harness, with its options
name = "archipelago"
[sandbox]
name = "docker"
[verifier]
name = "test-script"
[loss]               # a tackroom loss (registered into SkyRL's registry) and its aggregation
name = "dppo"
aggregation = "prompt_mean"
[model]
path = "Qwen/Qwen3.5-35B-A3B"
[train]              # the knobs the Mercor/SkyRL guide tuned
max_staleness_steps = 4
mini_batch_size = 32
samples_per_prompt = 8
[gpus]
inference = 8
train = 8
kv_cache_tokens_per_engine = 1_200_000
```

``[[harnesses]]`` in place of ``[harness]`` trains on a mix of harnesses (:mod:`tackroom_train.config_mix`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from tackroom import AGGREGATIONS, ConfigError
from tackroom_app import Endpoint, ExecutorName, NetworkDefaults, PluginSelection, TaskSelection, read_toml, validate
from tackroom_train.config_arms import ArmSpec, EvalSection, unique_labels
from tackroom_train.config_mix import MixedHarness, refuse_both, unique_harness_labels
from tackroom_train.config_sft import SftSection
from tackroom_train.config_tinker import TinkerSettings
from tackroom_train.tracking import TrackerName


class LossSelection(BaseModel):
    """``[loss]``: a tackroom loss by name, its aggregation and its options (``[loss.options]``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "dppo"
    aggregation: Literal["token_mean", "sequence_mean", "prompt_mean"] | None = None
    """Default: the loss spec's own aggregation."""
    options: dict[str, Any] = Field(default_factory=dict)


class ModelSection(BaseModel):
    """``[model]``: the policy being trained."""

    model_config = ConfigDict(extra="forbid")

    path: str
    """A Hugging Face id or local folder (SkyRL's ``trainer.policy.model.path``)."""
    tokenizer: str | None = None
    """Tokenizer for the rollout side (gateway, harnesses); default: the model path."""
    served_name: str | None = None
    """Model name at the inference endpoint; default: the path."""
    init_from: str | None = None
    """Start from an earlier ``tackroom train`` run: its folder (its ``policy/``, the weights it trained, e.g. an
    ``[sft] then_rl = false`` warm start) or a policy folder itself. That folder becomes the weights this run
    trains (the Tinker server's base model, SkyRL's ``trainer.policy.model.path``); ``path`` and ``tokenizer``
    still name the model and its tokenizer. A relative path resolves against the config file's folder."""


class TrainKnobs(BaseModel):
    """``[train]``: SkyRL's fully-async knobs plus the optimiser basics."""

    model_config = ConfigDict(extra="forbid")

    fully_async: bool = True
    max_staleness_steps: int = Field(default=4, ge=0)
    mini_batch_size: int = Field(default=32, ge=1)
    """Prompts (groups) per optimiser step: SkyRL's ``policy_mini_batch_size``."""
    train_batch_size: int | None = Field(default=None, ge=1)
    """Prompts per training batch; default: ``mini_batch_size`` (one optimiser step per batch)."""
    samples_per_prompt: int = Field(default=8, ge=1)
    """Trials per task in a group (GRPO's group size): SkyRL's ``n_samples_per_prompt``."""
    learning_rate: float = Field(default=1e-6, gt=0)
    epochs: int = Field(default=1, ge=1)
    max_training_steps: int | None = Field(default=None, ge=1)
    advantage_estimator: str = "grpo"
    use_kl_loss: bool = False
    temperature: float = Field(default=1.0, ge=0)
    max_prompt_length: int = Field(default=4096, ge=16)
    max_generate_length: int = Field(default=4096, ge=1)
    """Tokens per model turn (a harness may cap it lower)."""
    strategy: Literal["fsdp", "megatron"] = "fsdp"
    logprob_mismatch_warn: float = Field(default=0.03, ge=0)
    """Warn when a step's mean |trainer − rollout| logprob over trained tokens is above this (both backends).
    Not set, on the tinker backend sampling on the engine: 0.1 (``tackroom_train.mismatch.ENGINE_MISMATCH_WARN``:
    vLLM's and XLA's bf16 kernels alone differ by 0.03–0.075 there)."""
    tis_ratio_type: Literal["token", "sequence"] | None = None
    """Off-policy correction: truncated importance sampling on the trainer/sampler ratio, SkyRL's
    ``off_policy_correction.tis_ratio_type``. ``token``: each trained token's loss × min(π_trainer/π_sampler,
    ``token_tis_ratio_clip_high``); ``sequence``: every token of a sequence × min(Π_t π_trainer/π_sampler,
    ``sequence_tis_ratio_clip_high``). None: no correction."""
    token_tis_ratio_clip_high: float = Field(default=2.0, gt=0)
    sequence_tis_ratio_clip_high: float = Field(default=5.0, gt=0)
    preflight_passes: int = Field(default=1, ge=0)
    """Before training (tinker backend), run every task this many times and measure the non-model error rate;
    0 skips the pass (see tackroom_train.error_rate)."""
    max_error_rate: float = Field(default=0.05, ge=0, le=1)
    """Refuse to train when more than this share of the error-rate pass failed as ``infra`` or ``task``."""
    logger: str = "console"
    """SkyRL's ``trainer.logger`` on the GPU backend (one of SkyRL's; ``trackers`` with one entry sets it too)."""
    trackers: list[TrackerName] = Field(default_factory=list)
    """Where the per-step metrics go besides the console: ``tensorboard``, ``wandb`` (offline), ``mlflow``
    (a local SQLite store), all under the run's folder (see tackroom_train.tracking); each an optional extra of
    this plugin, and a missing package is a ConfigError naming it."""
    resample_rounds: int = Field(default=2, ge=0)
    """When groups of a batch have no learning signal (every trained row scored alike), sample up to this many
    more rounds of groups (fresh tasks, the same policy version) to fill the step with groups that have one;
    0: train on what the first batch gave (a batch without signal then takes no optimiser step)."""
    run_name: str = "tackroom"
    seed: int = 42


class GpuSplit(BaseModel):
    """``[gpus]``: the inference:train split and what sizes the rollout concurrency."""

    model_config = ConfigDict(extra="forbid")

    nodes: int = Field(default=1, ge=1)
    inference: int = Field(default=4, ge=1)
    """Inference GPUs in all (num_engines × tensor_parallel_size)."""
    train: int = Field(default=4, ge=1)
    """Training GPUs in all (policy workers)."""
    tensor_parallel_size: int = Field(default=1, ge=1)
    kv_cache_tokens_per_engine: int | None = Field(default=None, ge=1)
    """The KV cache one engine holds (vLLM prints "GPU KV cache size: N tokens" at start-up); None: no KV ceiling."""
    context_length: int = Field(default=32768, ge=256)
    """Tokens one trajectory may reach: the KV cache a rollout reserves at worst."""
    gpu_memory_utilization: float = Field(default=0.85, gt=0, le=1)

    @model_validator(mode="after")
    def _engines(self) -> GpuSplit:
        if self.inference % self.tensor_parallel_size:
            raise ValueError(f"inference GPUs ({self.inference}) must be a multiple of tensor_parallel_size "
                             f"({self.tensor_parallel_size})")
        if self.train % self.nodes:
            raise ValueError(f"train GPUs ({self.train}) must split evenly over {self.nodes} nodes")
        return self


class RolloutRules(BaseModel):
    """``[rollout]``: how trials run and which failures are masked (SkyRL issue #1613: a failed rollout never crashes a step)."""

    model_config = ConfigDict(extra="forbid")

    infra_attempts: int = Field(default=3, ge=1)
    """Attempts per trial while it fails with ``infra``; after the last one the trial is masked."""
    timeout_group_threshold: int = Field(default=2, ge=1)
    """This many timed-out trials in a group mask the whole group; fewer mask only themselves."""
    apply_overlong_filtering: bool = False
    """DAPO's overlong filtering (SkyRL's ``generator.apply_overlong_filtering``): a trial whose model was cut off
    at a token limit (its last engine call's ``finish_reason`` is ``length``, or the harness's stop reason is
    ``max_tokens``, ``length`` or ``context_exhausted``) is masked; it keeps its grade. Without it, a cut-off answer
    that happens to score teaches the model to keep talking; with it alone, nothing pushes a cut-off answer down
    (packages/train/README.md, "Masking rules", measured on examples/train/overfit.toml)."""
    executor: ExecutorName = "asyncio"
    """Where trials run: ``asyncio`` (the generator's process), ``ray`` (each a Ray task on SkyRL's cluster;
    tackroom-ray), or another registered executor."""
    out: str = "runs/train"
    """Run directory root: one folder per generate() call, with each trial's result and trajectory."""
    max_concurrency: int | None = Field(default=None, ge=1)
    """Cap on trials in flight; default: the derived rollout concurrency."""
    prepare_ahead: int = Field(default=0, ge=0, strict=True)
    """Trials of a batch started and set up beyond ``max_concurrency`` while others run, each waiting, prepared,
    for a turn (as ``[runtime] prepare_ahead`` of a run); only where ``max_concurrency`` holds a batch back."""
    network: NetworkDefaults = NetworkDefaults()
    """Each phase's network for tasks that declare none (as ``[runtime] network`` of a run): offline by default;
    ``{agent = "none", grading = "public"}`` keeps the policy offline while test.sh fetches its tools."""
    service: str | None = None
    """A ``tackroom serve`` URL (``--rollouts``): its trials run there, not in the trainer (see
    tackroom_train.remote_generator); it must reach the trainer's sampling endpoint."""
    service_token_env: str = "TACKROOM_SERVE_TOKEN"
    """The environment variable holding the service's bearer token."""
    service_policy_url: str | None = None
    """The trainer's sampling endpoint as the service reaches it (``http://trainer-host:port/v1``); default: the
    URL the trainer samples from itself."""
    service_tasks_root: str | None = None
    """A folder of this machine that the service's ``--tasks-root`` mirrors: task paths under it are sent
    relative to it. Default: absolute paths (the tasks at the same paths on both machines)."""


class TrainConfig(TaskSelection):
    """A ``tackroom train`` config file (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    harness: PluginSelection = Field(default_factory=lambda: PluginSelection(name="archipelago"))
    """The one harness every rollout runs under; unused when ``harnesses`` is set."""
    harnesses: list[MixedHarness] = Field(default_factory=list)
    """``[[harnesses]]``: train on a mix instead of ``[harness]`` (both set: refused): every task under every
    harness, ``weight`` rows each (see tackroom_train.config_mix)."""
    sandbox: PluginSelection = Field(default_factory=lambda: PluginSelection(name="docker"))
    verifier: PluginSelection = Field(default_factory=lambda: PluginSelection(name="test-script"))
    policy: Endpoint = Field(default_factory=Endpoint)
    """Rollout-side policy settings (sampling, gateway); ``base_url`` is SkyRL's inference endpoint when empty."""
    loss: LossSelection = Field(default_factory=LossSelection)
    model: ModelSection
    train: TrainKnobs = Field(default_factory=TrainKnobs)
    gpus: GpuSplit = Field(default_factory=GpuSplit)
    rollout: RolloutRules = Field(default_factory=RolloutRules)
    backend: Literal["skyrl", "tinker"] = "skyrl"
    """``skyrl``: SkyRL's fully-async trainer on GPU nodes; ``tinker``: SkyRL's Tinker API server (JAX, runs on CPU)."""
    tinker: TinkerSettings = Field(default_factory=TinkerSettings)
    """``[tinker]``: the Tinker backend's server, LoRA and loss path."""
    skyrl: dict[str, Any] = Field(default_factory=dict)
    """Raw SkyRL overrides by dotted path (``"trainer.algorithm.eps_clip_high" = 0.28``), applied last."""
    arms: list[ArmSpec] = Field(default_factory=list)
    """``[[arms]]``: ablation arms, each the whole config with a few overrides (see tackroom_train.arms)."""
    eval: EvalSection | None = None
    """``[eval]``: serve the final policy (each arm's) and evaluate it with the matrix (see tackroom_train.arms)."""
    sft: SftSection | None = None
    """``[sft]``: a supervised warm start on demonstrations before RL (see tackroom_train.config_sft)."""

    @property
    def sft_only(self) -> bool:
        """Whether the run trains the ``[sft]`` warm start and no RL (``then_rl = false``)."""
        return self.sft is not None and not self.sft.then_rl

    @property
    def mixed(self) -> bool:
        """Whether the run trains on a mix of harnesses (``[[harnesses]]``)."""
        return bool(self.harnesses)

    @model_validator(mode="before")
    @classmethod
    def _one_harness_section(cls, data: Any) -> Any:
        return refuse_both(data)

    @model_validator(mode="after")
    def _aggregation(self) -> TrainConfig:
        if self.loss.aggregation is not None and self.loss.aggregation not in AGGREGATIONS:
            raise ValueError(f"loss.aggregation must be one of {', '.join(AGGREGATIONS)}")
        unique_labels(self.arms)
        unique_harness_labels(self.harnesses)
        return self

    @model_serializer(mode="wrap")
    def _without_unused_harness(self, handler: SerializerFunctionWrapHandler) -> Any:
        # with [[harnesses]] the default [harness] is not part of the config: a dump (the run's record, an arm's
        # config rebuilt from one) must not read back as both set
        data = handler(self)
        if self.harnesses and isinstance(data, dict):
            data.pop("harness", None)
        return data


def load_train_config(path: str | Path) -> TrainConfig:
    """Read and validate a train config; relative task paths resolve against the file's folder."""
    p = Path(path)
    config = validate(TrainConfig, read_toml(p), source=str(p))

    def beside(t: str) -> str:
        return str((p.parent / t).resolve()) if not Path(t).is_absolute() else t

    config.tasks = [beside(t) for t in config.tasks]
    if config.eval is not None:
        config.eval.tasks = [beside(t) for t in config.eval.tasks]
    if config.sft is not None:
        config.sft.dataset = beside(config.sft.dataset)
    if config.model.init_from is not None:
        config.model.init_from = beside(config.model.init_from)
    if config.rollout.service_tasks_root is not None:
        config.rollout.service_tasks_root = beside(config.rollout.service_tasks_root)
    if not config.tasks and not config.sft_only:
        raise ConfigError(f"{p}: tasks: no tasks given; list task or dataset directories, e.g. tasks = [\"../tasks\"]"
                          " (a run that trains only an [sft] warm start, then_rl = false, needs none)")
    return config
