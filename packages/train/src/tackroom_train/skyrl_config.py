"""A :class:`~tackroom_train.plan.TrainPlan` mapped onto SkyRL's config, as dotted overrides.

The mapping is a plain ``{"trainer.x.y": value}`` dict (readable, testable
field by field without SkyRL); :func:`build_skyrl_config` hands it to
``SkyRLTrainConfig.from_cli_overrides``, which type-checks every path.

The loss: every installed loss is in SkyRL's registry as ``tackroom_<name>`` (:mod:`tackroom_train.losses`), so
SkyRL calls the loss's own function; the aggregation is SkyRL's ``loss_reduction``; and the options reach the
function as fields of SkyRL's ``AlgorithmConfig`` (the ``config`` SkyRL hands it) through the loss's own
``LossSpec.mappings["skyrl"]``: a function of its options returning ``{dotted AlgorithmConfig path: value}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tackroom import ConfigError
from tackroom_train.ceilings import Ceilings, derive_ceilings
from tackroom_train.dataset import ENV_CLASS
from tackroom_train.plan import LossPlan, TrainPlan

LOSS_PREFIX = "tackroom_"
"""tackroom losses enter SkyRL's registry as ``tackroom_<name>`` (SkyRL has a ``dppo`` of its own)."""
ALGORITHM = "trainer.algorithm."
"""Where SkyRL's ``AlgorithmConfig`` sits among the overrides: a ``skyrl`` mapping's paths are relative to it."""


def loss_overrides(loss: LossPlan) -> dict[str, Any]:
    """``[loss]`` on SkyRL: the loss's own function from SkyRL's registry, the aggregation as ``loss_reduction``,
    and the options as the ``AlgorithmConfig`` fields the loss's ``skyrl`` mapping names. A loss without that
    mapping trains with nothing carried, unless ``[loss.options]`` sets something it could not carry."""
    out = {ALGORITHM + "policy_loss_type": LOSS_PREFIX + loss.name, ALGORITHM + "loss_reduction": loss.aggregation}
    given = sorted(set(loss.options.model_fields_set) - {"aggregation"})
    if not loss.declares("skyrl") and not given:
        return out
    fields = loss.mapped("skyrl", expected="a function of its options returning them as fields of SkyRL's "
                         "AlgorithmConfig, by dotted path", otherwise=f"[loss.options] {', '.join(given)} cannot "
                         "reach it on SkyRL without one: declare it in the loss's plugin, or drop those options")
    return {**out, **{ALGORITHM + path: value for path, value in fields.items()}}


def skyrl_logger(t: Any) -> str:
    """SkyRL's ``trainer.logger``: one tracker of ``[train] trackers`` (SkyRL's trainer logs to one), else
    ``[train] logger``."""
    if len(t.trackers) > 1:
        raise ConfigError(f"[train] trackers = {t.trackers}: SkyRL's GPU trainer logs to one tracker "
                          "(trainer.logger); name one, or train with backend = \"tinker\", which logs to each")
    return t.trackers[0] if t.trackers else t.logger


def skyrl_overrides(plan: TrainPlan, *, dataset_path: str | Path, run_dir: str | Path,
                    ceilings: Ceilings | None = None, start: str | Path | None = None) -> dict[str, Any]:
    """Every SkyRL field ``tackroom train`` sets, by dotted path; the policy starts from ``start`` (the ``[sft]``
    warm start's export), else ``[model] init_from``'s folder, else ``[model] path``."""
    t, g = plan.train, plan.gpus
    ceilings = ceilings or derive_ceilings(t, g, plan.rollout.rollout.max_concurrency)
    run_dir = Path(run_dir)
    o: dict[str, Any] = {
        # data: the task set as SkyRL's prompt dataset
        "data.train_data": [str(dataset_path)],
        "data.val_data": [],
        "environment.env_class": ENV_CLASS,
        # the policy
        "trainer.policy.model.path": str(start or plan.start_from or plan.model.path),
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
        # the loss itself, its aggregation and options: loss_overrides, below
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
    if plan.model.served_name:
        o["generator.inference_engine.served_model_name"] = plan.model.served_name
    o.update(loss_overrides(plan.loss))
    o.update(plan.skyrl)
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
