"""A :class:`TrainConfig` mapped onto SkyRL's config, as dotted overrides.

The mapping is a plain ``{"trainer.x.y": value}`` dict (readable, testable
field by field without SkyRL); :func:`build_skyrl_config` hands it to
``SkyRLTrainConfig.from_cli_overrides``, which type-checks every path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tackroom import ConfigError
from tackroom.app import PluginSelection, instantiate
from tackroom_skyrl.ceilings import Ceilings, derive_ceilings
from tackroom_skyrl.config import TrainConfig

ENV_CLASS = "tackroom"
"""``env_class`` of every prompt row: the generator, not a SkyRL-Gym env, runs it."""
LOSS_PREFIX = "tackroom_"
"""tackroom losses enter SkyRL's registry as ``tackroom_<name>`` (SkyRL has a ``dppo`` of its own)."""


def resolve_loss(config: TrainConfig, manager: Any = None) -> tuple[Any, Any, str]:
    """(LossSpec, validated options, aggregation) for ``[loss]``; unknown names list the installed losses."""
    selection = PluginSelection(name=config.loss.name, **config.loss.options)
    spec, options = instantiate("loss", selection, where="loss", manager=manager)
    aggregation = config.loss.aggregation or getattr(options, "aggregation", None) or spec.aggregation
    return spec, options, aggregation


def loss_overrides(options: Any) -> dict[str, Any]:
    """The loss options SkyRL's ``AlgorithmConfig`` carries (the options class names them in ``skyrl_fields``)."""
    fields: dict[str, str] = getattr(type(options), "skyrl_fields", {}) or {}
    return {f"trainer.algorithm.{dotted}": getattr(options, ours) for ours, dotted in fields.items()}


def skyrl_logger(t: Any) -> str:
    """SkyRL's ``trainer.logger``: one tracker of ``[train] trackers`` (SkyRL's trainer logs to one), else
    ``[train] logger``."""
    if len(t.trackers) > 1:
        raise ConfigError(f"[train] trackers = {t.trackers}: SkyRL's GPU trainer logs to one tracker "
                          "(trainer.logger); name one, or train with backend = \"tinker\", which logs to each")
    return t.trackers[0] if t.trackers else t.logger


def skyrl_overrides(config: TrainConfig, *, dataset_path: str | Path, run_dir: str | Path,
                    manager: Any = None, ceilings: Ceilings | None = None) -> dict[str, Any]:
    """Every SkyRL field ``tackroom train`` sets, by dotted path."""
    t, g = config.train, config.gpus
    ceilings = ceilings or derive_ceilings(config)
    spec, options, aggregation = resolve_loss(config, manager)
    run_dir = Path(run_dir)
    o: dict[str, Any] = {
        # data: the task set as SkyRL's prompt dataset
        "data.train_data": [str(dataset_path)],
        "data.val_data": [],
        "environment.env_class": ENV_CLASS,
        # the policy
        "trainer.policy.model.path": config.model.path,
        "trainer.policy.optimizer_config.lr": t.learning_rate,
        "trainer.strategy": t.strategy,
        "trainer.seed": t.seed,
        # fully async
        "trainer.fully_async.enabled": t.fully_async,
        "trainer.fully_async.max_staleness_steps": t.max_staleness_steps,
        "trainer.fully_async.num_parallel_generation_workers": ceilings.generation_workers,
        "trainer.policy_mini_batch_size": t.mini_batch_size,
        "trainer.train_batch_size": t.train_batch_size or t.mini_batch_size,
        "generator.n_samples_per_prompt": t.samples_per_prompt,
        # the loss
        "trainer.algorithm.policy_loss_type": LOSS_PREFIX + spec.name,
        "trainer.algorithm.loss_reduction": aggregation,
        "trainer.algorithm.advantage_estimator": t.advantage_estimator,
        "trainer.algorithm.use_kl_loss": t.use_kl_loss,
        **({} if t.tis_ratio_type is None else {
            "trainer.algorithm.off_policy_correction.tis_ratio_type": t.tis_ratio_type,
            "trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high": t.token_tis_ratio_clip_high,
            "trainer.algorithm.off_policy_correction.sequence_tis_ratio_clip_high": t.sequence_tis_ratio_clip_high}),
        # inference:train split
        "trainer.placement.colocate_all": False,
        "trainer.placement.policy_num_nodes": g.nodes,
        "trainer.placement.policy_num_gpus_per_node": g.train // g.nodes,
        "generator.inference_engine.num_engines": ceilings.num_engines,
        "generator.inference_engine.tensor_parallel_size": g.tensor_parallel_size,
        "generator.inference_engine.gpu_memory_utilization": g.gpu_memory_utilization,
        "generator.inference_engine.max_num_seqs": max(1, -(-ceilings.rollout_concurrency // ceilings.num_engines)),
        # sampling: rollout logprobs are what DPPO/GLM-5 and the mismatch check need
        "generator.sampling_params.temperature": t.temperature,
        "generator.sampling_params.max_generate_length": t.max_generate_length,
        "generator.sampling_params.logprobs": 1,
        "trainer.max_prompt_length": t.max_prompt_length,
        # bookkeeping
        "trainer.epochs": t.epochs,
        "trainer.max_training_steps": t.max_training_steps,
        "trainer.eval_interval": -1,
        "trainer.eval_before_train": False,
        "trainer.logger": skyrl_logger(t),
        "trainer.run_name": t.run_name,
        "trainer.project_name": "tackroom",
        "trainer.ckpt_path": str(run_dir / "ckpts"),
        "trainer.export_path": str(run_dir / "exports"),
        "trainer.log_path": str(run_dir / "logs"),
    }
    if config.model.served_name:
        o["generator.inference_engine.served_model_name"] = config.model.served_name
    o.update(loss_overrides(options))
    o.update(config.skyrl)
    return o


def build_skyrl_config(overrides: dict[str, Any]) -> Any:
    """SkyRL's typed ``SkyRLTrainConfig`` from the overrides; a bad path becomes a :class:`ConfigError`."""
    from skyrl.train.config import SkyRLTrainConfig

    try:
        return SkyRLTrainConfig.from_cli_overrides(dict(overrides))
    except ImportError:  # an environment problem, not a config one
        raise
    except Exception as exc:  # SkyRL raises ValueError/KeyError/omegaconf errors for a bad path or type
        raise ConfigError(f"SkyRL rejected the mapped config ([skyrl] overrides or a knob): {exc}") from exc
