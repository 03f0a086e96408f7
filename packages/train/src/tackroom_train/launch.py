"""The ``skyrl`` backend: SkyRL's ``FullyAsyncRayPPOTrainer`` with :class:`TackroomGenerator` as its rollout engine
(:class:`~tackroom_train.remote_generator.RemoteGenerator` with ``--rollouts``).

:class:`SkyrlBackend` maps the plan (ceilings, SkyRL's overrides) when it is opened and :func:`launch` runs it.
Needs GPUs and vLLM (:func:`tackroom_train.preflight.check_machine` refuses
early otherwise). Everything before the launch — dataset, config mapping,
ceilings — is the same code the CPU tests and ``--dry-run`` exercise.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tackroom import ConfigError
from tackroom.services import redact
from tackroom_train.backends import Mode, Output
from tackroom_train.ceilings import Ceilings, derive_ceilings
from tackroom_train.config import TrainConfig
from tackroom_train.plan import TrainPlan
from tackroom_train.preflight import check_machine
from tackroom_train.skyrl_config import skyrl_overrides
from tackroom_train.skyrl_sft import sft_overrides, sft_policy_dir


class SkyrlLaunch(BaseModel):
    """What the SkyRL backend is about to do: the plan mapped onto SkyRL (``--json`` prints it)."""

    run_dir: str
    dataset: str
    tasks: int
    ceilings: Ceilings
    overrides: dict[str, Any]
    """SkyRL's RL config (empty for an ``[sft]`` warm start alone)."""
    sft_overrides: dict[str, Any] | None = None
    """SkyRL's ``SFTConfig`` for the ``[sft]`` warm start, run before RL (:mod:`tackroom_train.skyrl_sft`)."""


class SkyrlBackend:
    """The ``skyrl`` backend (:class:`~tackroom_train.backends.Backend`): SkyRL's fully-async trainer on GPU nodes.
    Trains only: the error-rate pass, ``[[arms]]`` and ``[eval]`` run on the tinker backend."""

    name = "skyrl"

    def __init__(self, plan: TrainPlan, run_dir: Path, dataset: Path) -> None:
        self.plan = plan
        self.run_dir = run_dir
        ceilings = derive_ceilings(plan.train, plan.gpus, plan.rollout.rollout.max_concurrency)
        warm = sft_overrides(plan, run_dir) if plan.sft is not None else None
        start = sft_policy_dir(plan.sft, run_dir) if plan.sft is not None else None
        overrides = skyrl_overrides(plan, dataset_path=dataset, run_dir=run_dir, ceilings=ceilings,
                                    start=start) if plan.rl else {}
        self.view = SkyrlLaunch(run_dir=str(run_dir), dataset=str(dataset), tasks=len(plan.rows), ceilings=ceilings,
                                overrides=overrides, sft_overrides=warm)

    def describe(self) -> list[str]:
        lines = ["  " + line for line in self.view.ceilings.lines()] if self.plan.rl else []
        if self.plan.sft is not None:
            lines.append(f"  {self.plan.sft.describe()}; SkyRL's SFT trainer, then "
                         + ("RL from its export" if self.plan.rl else f"{self.run_dir / 'policy'}"))
        return lines

    def dry_run(self, config: TrainConfig) -> list[str]:
        lines = []
        if self.view.sft_overrides is not None:
            from tackroom_train.skyrl_sft import build_sft_config

            build_sft_config(self.view.sft_overrides)  # SkyRL's own check of the mapped SFTConfig
            lines += ["SkyRL SFT overrides (skyrl.train.main_sft):",
                      *(f"  {k} = {json.dumps(v)}" for k, v in self.view.sft_overrides.items())]
        if self.plan.rl:
            lines += ["SkyRL overrides:", *(f"  {k} = {json.dumps(v)}" for k, v in redact(self.view.overrides).items())]
        return lines

    def run(self, config: TrainConfig, mode: Mode, out: Output) -> int:
        if mode == "preflight":
            raise ConfigError("--preflight runs on the tinker backend; on the SkyRL backend run the error-rate "
                              "pass as a matrix over the training tasks (tackroom matrix --passes N)")
        if mode != "train":
            raise ConfigError("[[arms]] and [eval] run on the tinker backend (backend = \"tinker\"); on the SkyRL "
                              "GPU backend train each arm as its own config and evaluate with tackroom matrix")
        check_machine(self.plan.gpus)
        if self.plan.rl and self.plan.rollout.rollout.service:  # the service answers before SkyRL starts anything
            from tackroom_train.remote_generator import check_service
            from tackroom_train.rollout_source import run_key, service_settings

            asyncio.run(check_service(service_settings(self.plan.rollout, run_id=run_key(self.run_dir))))
        if self.view.sft_overrides is not None:
            from tackroom_train.skyrl_sft import run_sft

            policy = run_sft(self.plan, self.view.sft_overrides, self.run_dir)
            out.say(f"sft: the warm policy is {policy} (SkyRL's SFT log: {self.run_dir / 'sft' / 'sft.log'})")
            if not self.plan.rl:
                out.say(f"start RL from it: [model] init_from = \"{self.run_dir}\"")
                return 0
        launch(self.plan, self.view)
        return 0


def launch(plan: TrainPlan, mapped: SkyrlLaunch) -> None:
    """Run SkyRL's fully-async trainer (blocks until training ends). GPU nodes only."""
    import ray
    from skyrl.train.entrypoints.main_base import BasePPOExp
    from skyrl.train.fully_async_trainer import FullyAsyncRayPPOTrainer
    from skyrl.train.utils.utils import initialize_ray, validate_cfg

    from tackroom_train.losses import register_losses
    from tackroom_train.rollout_source import run_key, service_settings
    from tackroom_train.skyrl_config import build_skyrl_config

    cfg = build_skyrl_config(mapped.overrides)
    validate_cfg(cfg)
    register_losses()  # local registry first; initialize_ray syncs it into SkyRL's registry actor
    initialize_ray(cfg)
    # a copy, not JSON: a JSON dump masks the policy's api_key (SecretStr); the copy keeps it unrevealed
    rollout = plan.rollout.model_copy(deep=True)
    mismatch_warn = plan.train.logprob_mismatch_warn
    rollout_root = str(Path(mapped.run_dir) / "rollouts")
    run_id = run_key(Path(mapped.run_dir))
    service = service_settings(rollout, run_id=run_id)  # read here, where the token's variable is set, not in Ray

    class TackroomExp(BasePPOExp):
        """SkyRL's experiment with tackroom's generator and the fully-async trainer."""

        def get_generator(self, cfg: Any, tokenizer: Any, inference_engine_client: Any) -> Any:
            from tackroom_train.rollout_source import rollout_generator

            url = getattr(inference_engine_client, "proxy_url", None)
            if not url:
                raise RuntimeError("SkyRL's inference client exposes no proxy_url; tackroom's generator needs the "
                                   "engines' OpenAI-compatible endpoint (SkyRL >= 0.4 HTTP inference servers)")
            side = rollout.model_copy(deep=True)
            # with [rollout] service (--rollouts): a RemoteGenerator, its trials on that tackroom serve
            return rollout_generator(side, run_id=run_id, phase="train", base_url=url.rstrip("/") + "/v1",
                                     tokenizer=tokenizer, model=side.model.served_name or side.model.path,
                                     run_root=rollout_root, service=service)

        def get_trainer(self, cfg, tracker, tokenizer, train_dataset, eval_dataset, inference_engine_client,
                        generator, colocate_pg):
            from tackroom_train.mismatch import MismatchWatch

            tracker = MismatchWatch(tracker, mismatch_warn)
            if not cfg.trainer.fully_async.enabled:
                return super().get_trainer(cfg, tracker, tokenizer, train_dataset, eval_dataset,
                                           inference_engine_client, generator, colocate_pg)
            return FullyAsyncRayPPOTrainer(
                cfg=cfg, tracker=tracker, tokenizer=tokenizer, train_dataset=train_dataset, eval_dataset=eval_dataset,
                inference_engine_client=inference_engine_client, generator=generator, colocate_pg=colocate_pg)

    @ray.remote(num_cpus=1)
    def entrypoint(cfg: Any) -> None:
        TackroomExp(cfg).run()

    (Path(mapped.run_dir) / "skyrl_overrides.json").write_text(json.dumps(redact(mapped.overrides), indent=2))
    ray.get(entrypoint.remote(cfg))
