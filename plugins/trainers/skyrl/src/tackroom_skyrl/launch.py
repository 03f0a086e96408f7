"""Launching SkyRL's ``FullyAsyncRayPPOTrainer`` with :class:`TackroomGenerator` as its rollout engine.

Needs GPUs and vLLM (:func:`tackroom_skyrl.preflight.check_machine` refuses
early otherwise). Everything before the launch — dataset, config mapping,
ceilings — is the same code the CPU tests and ``--dry-run`` exercise.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tackroom_skyrl.ceilings import Ceilings, derive_ceilings
from tackroom_skyrl.config import TrainConfig
from tackroom_skyrl.dataset import prompt_rows, write_prompt_dataset
from tackroom_skyrl.skyrl_config import skyrl_overrides


class TrainPlan(BaseModel):
    """What ``tackroom train`` is about to do."""

    run_dir: str
    dataset: str
    tasks: int
    ceilings: Ceilings
    overrides: dict[str, Any]


def plan(config: TrainConfig, run_dir: str | Path, manager: Any = None) -> TrainPlan:
    """Write the prompt dataset and map the config; no GPU needed."""
    run_dir = Path(run_dir)
    rows = prompt_rows(config.tasks, config.include, config.exclude)
    dataset = write_prompt_dataset(rows, run_dir / "prompts.jsonl")
    ceilings = derive_ceilings(config)
    overrides = skyrl_overrides(config, dataset_path=dataset, run_dir=run_dir, manager=manager, ceilings=ceilings)
    return TrainPlan(run_dir=str(run_dir), dataset=str(dataset), tasks=len(rows), ceilings=ceilings,
                     overrides=overrides)


def launch(config: TrainConfig, train_plan: TrainPlan) -> None:
    """Run SkyRL's fully-async trainer (blocks until training ends). GPU nodes only."""
    import ray
    from skyrl.train.entrypoints.main_base import BasePPOExp
    from skyrl.train.fully_async_trainer import FullyAsyncRayPPOTrainer
    from skyrl.train.utils.utils import initialize_ray, validate_cfg

    from tackroom_skyrl.losses import register_losses
    from tackroom_skyrl.skyrl_config import build_skyrl_config

    cfg = build_skyrl_config(train_plan.overrides)
    validate_cfg(cfg)
    register_losses()  # local registry first; initialize_ray syncs it into SkyRL's registry actor
    initialize_ray(cfg)
    # a copy, not JSON: a JSON dump masks the policy's api_key (SecretStr); the copy keeps it unrevealed
    train_config = config.model_copy(deep=True)
    rollout_root = str(Path(train_plan.run_dir) / "rollouts")

    class TackroomExp(BasePPOExp):
        """SkyRL's experiment with tackroom's generator and the fully-async trainer."""

        def get_generator(self, cfg: Any, tokenizer: Any, inference_engine_client: Any) -> Any:
            from tackroom_skyrl.generator import TackroomGenerator

            url = getattr(inference_engine_client, "proxy_url", None)
            if not url:
                raise RuntimeError("SkyRL's inference client exposes no proxy_url; tackroom's generator needs the "
                                   "engines' OpenAI-compatible endpoint (SkyRL >= 0.4 HTTP inference servers)")
            tc = train_config.model_copy(deep=True)
            return TackroomGenerator(tc, base_url=url.rstrip("/") + "/v1", tokenizer=tokenizer,
                                     model=tc.model.served_name or tc.model.path, run_root=rollout_root)

        def get_trainer(self, cfg, tracker, tokenizer, train_dataset, eval_dataset, inference_engine_client,
                        generator, colocate_pg):
            from tackroom_skyrl.mismatch import MismatchWatch

            tracker = MismatchWatch(tracker, train_config.train.logprob_mismatch_warn)
            if not cfg.trainer.fully_async.enabled:
                return super().get_trainer(cfg, tracker, tokenizer, train_dataset, eval_dataset,
                                           inference_engine_client, generator, colocate_pg)
            return FullyAsyncRayPPOTrainer(
                cfg=cfg, tracker=tracker, tokenizer=tokenizer, train_dataset=train_dataset, eval_dataset=eval_dataset,
                inference_engine_client=inference_engine_client, generator=generator, colocate_pg=colocate_pg)

    @ray.remote(num_cpus=1)
    def entrypoint(cfg: Any) -> None:
        TackroomExp(cfg).run()

    from tackroom import redact

    (Path(train_plan.run_dir) / "skyrl_overrides.json").write_text(json.dumps(redact(train_plan.overrides), indent=2))
    ray.get(entrypoint.remote(cfg))
