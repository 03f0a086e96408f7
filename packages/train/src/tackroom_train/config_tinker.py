"""``[tinker]`` in a train config: the Tinker backend's settings (its server, the LoRA, the loss path, where rollouts
sample). A config model only: reading a train config never imports the server or its HTTP client."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class TinkerSettings(BaseModel):
    """``[tinker]`` in a train config."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = None
    """A running Tinker-compatible server; empty: start SkyRL's for the run (and stop it after)."""
    base_model: str | None = None
    """What the server loads: a local HF folder (``smollm2`` = the folder `tackroom model up` converts); default: ``[model] path``."""
    lora_rank: int = Field(default=8, ge=1)
    learning_rate: float | None = Field(default=None, gt=0)
    """LoRA learning rate (Adam); default: ``[train] learning_rate``."""
    loss_fn: Literal["auto", "tackroom", "importance_sampling", "ppo", "cispo"] = "auto"
    """``auto``: the ``[loss]`` as the Tinker built-in it equals on-policy (``dppo``/``glm5`` →
    ``importance_sampling``, ``ppo_clip`` → ``ppo``); a built-in by name; or ``tackroom``: the loss in torch
    through Tinker's custom-loss path (servers with a plain weighted-sum cross-entropy; not SkyRL 0.4's JAX
    backend). See :mod:`tackroom_train.tinker.datums`."""
    sampler: Literal["engine", "tinker"] = "engine"
    """Where rollouts sample: ``engine``, a vLLM engine the run starts on ``engine_port`` with LoRA enabled, each
    optimiser step's LoRA loaded into it (see :mod:`tackroom_train.tinker.engine_sampling`); ``tinker``: the
    Tinker server's own (JAX) sampler."""
    engine_port: int = Field(default=8013, ge=1, le=65535)
    """The run's own engine (not 8011, the shared one)."""
    engine_max_loras: int = Field(default=2, ge=1)
    engine_kv_cache_gib: int = Field(default=1, ge=1)
    engine_start_timeout_s: float = Field(default=900.0, gt=0)
    normalize_advantages: bool = True
    """GRPO: divide by the group's reward std (SkyRL's ``norm_adv_by_std_in_grpo``)."""
    port: int = 0
    """Port for a started server (0: a free one)."""
    backend_config: dict[str, Any] = Field(default_factory=dict)
    """Passed as ``--backend-config`` (e.g. ``train_micro_batch_size``, ``sample_max_num_sequences``)."""
    startup_timeout_s: float = Field(default=600.0, gt=0)
    request_timeout_s: float = Field(default=900.0, gt=0)
    """Longest wait for one Tinker call (a sample, forward_backward, optim_step, a save): the Tinker SDK itself
    retries a dead server for ever."""
    server_dir: str | None = None
    """The server's uv project; default ``$TACKROOM_TINKER_SERVER_DIR`` or ``~/.cache/tackroom/tinker-server``."""
