"""The RL loop of ``tackroom train --backend tinker``.

Why a loop of our own (thin, on purpose): tinker-cookbook's RL loop drives
its own token-level ``Env`` objects, and SkyRL's trainer needs GPUs and vLLM;
ours must drive *harnesses* — agent loops that speak HTTP to an
OpenAI-compatible engine inside sandboxes — through the trial runtime, exactly
as the GPU backend does. Each step has four parts, each a module:

1. rollouts (:mod:`.rollouts`): ``TackroomGenerator.generate`` (the same generator SkyRL's trainer calls:
   trial runtime, harness, sandbox, verifier, masking rules) on a :class:`~.sampler.Sampler` pinned to the
   batch's policy version: the run's own vLLM engine with the live LoRA (``[tinker] sampler = "engine"``,
   the default) or the Tinker server's JAX sampler (``"tinker"``). Either way the exact token ids and
   logprobs come back;
2. GRPO advantages per task group; masked rows train nothing (:class:`~.step_trainer.StepTrainer`);
3. the loss path chosen once for the run (:mod:`.step_trainer`: a Tinker built-in, the same with truncated
   importance sampling, or the tackroom loss through Tinker's custom-loss path), then ``optim_step`` (Adam on
   the LoRA weights). A step where every group's rewards are equal has no learning signal and takes no
   optimiser step;
4. the hand-off: the sampler publishes the new weights as the next policy version before any batch samples
   with them.

Before step 1 an ``[sft]`` warm start (:mod:`.sft`) trains the same LoRA on demonstrations, so version 0 is the
warm policy; with ``then_rl = false`` the run stops there and exports it.

:func:`.pipeline.run_pipeline` drives them: rollouts for the next step run while a step trains, up to
``[train] max_staleness_steps`` versions behind; a batch staler than that is dropped, never trained on.
:class:`~.run_log.RunLog` records each step (:class:`~.records.StepRecord`) into ``steps.jsonl``, each row's
version and staleness into ``trajectories.jsonl``, and the curve into ``reward_curve.csv`` and
``reward_curve.png``; the trainer-vs-rollout logprob mismatch is warned above ``[train] logprob_mismatch_warn``.

After the last step the final LoRA is saved (``save_weights_for_sampler``) and
:mod:`.policy` turns it into ``<run>/adapter/`` (the PEFT adapter) and
``<run>/policy/``: the LoRA merged into the base, an HF folder ``tackroom model
up --model`` serves; ``summary.json`` records both and the command.

:func:`train_on_tinker` takes the resolved plan (:mod:`tackroom_train.plan`) and a :class:`RunScope`; each
function after it takes the plan and its own parts (:class:`Server`: what the run talks to; :class:`StepParts`:
what it builds once on a connected server). :func:`run_tinker` resolves a config into its plan first.
"""

from __future__ import annotations

import asyncio
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel

from tackroom import ConfigError, InfraError
from tackroom_train.arms import EvalRow
from tackroom_train.config import TrainConfig, TrainKnobs
from tackroom_train.config_tinker import TinkerSettings
from tackroom_train.error_rate import PreflightRefusedError, PreflightReport, error_rate_pass
from tackroom_train.plan import TrainPlan, resolve_plan
from tackroom_train.tinker.client import TrainingClient
from tackroom_train.tinker.engine_sampling import EngineSampling
from tackroom_train.tinker.pipeline import run_pipeline
from tackroom_train.tinker.policy import PolicyExportError, PolicyFolder, export_policy, mark_latest, serve_command
from tackroom_train.tinker.rollouts import Rollouts, task_batches
from tackroom_train.tinker.run_log import RunLog
from tackroom_train.tinker.sampler import EngineSampler, JaxSampler, Sampler
from tackroom_train.tinker.server import TinkerCalls, TinkerServer, check_reachable
from tackroom_train.tinker.sft import SftReport, warm_start
from tackroom_train.tinker.step_trainer import LossChoice, StepTrainer, loss_path
from tackroom_train.tracking import Tracker, TrackerSet, check_trackers, open_trackers


class TinkerRunSummary(BaseModel):
    run_dir: str
    steps: int
    first_reward: float
    last_reward: float
    best_reward: float
    mismatch_mean: float | None
    mismatch_warnings: int
    mismatch_warn: float | None = None
    """The threshold the warnings counted against (``[train] logprob_mismatch_warn`` in effect)."""
    curve_csv: str
    curve_png: str
    final_weights: str | None = None
    """The trained LoRA as a ``tinker://`` path (its files under ``<run>/tinker/checkpoints``)."""
    preflight: PreflightReport | None = None
    """The error-rate pass before training (``[train] preflight_passes``)."""
    adapter: str | None = None
    """The final LoRA as a PEFT adapter folder (``<run>/adapter``)."""
    policy: str | None = None
    """The trained policy: the base with the final LoRA merged, an HF folder an engine serves (``<run>/policy``)."""
    served_name: str | None = None
    serve_command: str | None = None
    """The command that serves :attr:`policy` beside the default engine."""
    policy_error: str | None = None
    """Why no :attr:`policy` was written, when that failed (the LoRA itself is still in :attr:`final_weights`)."""
    warm_policy: str | None = None
    """An ``[sft]`` warm start followed by RL: the warm start alone, merged (``<run>/warm-policy``), the policy RL
    started from, to evaluate beside :attr:`policy`."""
    reward_per_step: list[float] = []
    harnesses: list[str] = []
    """The mix's harness labels (``[[harnesses]]``); empty: one harness."""
    reward_per_harness_per_step: dict[str, list[float | None]] = {}
    """Each harness of a mix: its mean reward per step (None: none of its rows was drawn that step)."""
    mismatch_per_step: list[float | None] = []
    """Mean |trainer − rollout| logprob over trained tokens, per step (None: nothing trained that step)."""
    sampler: str = "engine"
    """Where rollouts sampled: ``engine`` (vLLM with the live LoRA) or ``tinker`` (the Tinker server's sampler)."""
    staleness_per_step: list[int] = []
    """Per step: versions published between the batch's sampling and its training (≤ max_staleness_steps)."""
    dropped_batches: int = 0
    """Batches sampled but never trained on: staler than max_staleness_steps when their turn came."""
    handoff_s_per_step: list[float | None] = []
    """Per step: seconds from the optimiser step to the new weights being the sampler's (None: no update)."""
    eval: list[EvalRow] | None = None
    """The ``[eval]`` table: the served final policy under each eval harness (tackroom_train.sweep)."""
    sft: SftReport | None = None
    """The ``[sft]`` warm start before the RL steps (or instead of them: ``then_rl = false``, ``steps`` 0)."""


def resolve_base_model(name: str) -> str:
    """A local HF folder; ``smollm2`` (or SmolLM2's hub id) is the folder ``tackroom model up`` converts."""
    from tackroom_engine import MODEL_NAME, model_dir

    if name in ("smollm2", MODEL_NAME, f"HuggingFaceTB/{MODEL_NAME}"):
        folder = model_dir()
        if not (folder / "config.json").is_file():
            raise ConfigError(f"model {name!r}: {folder} is not there yet; `tackroom model up` converts it once "
                              "(or give [tinker] base_model = a local HF folder)")
        return str(folder)
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser().resolve())
    raise ConfigError(f"model {name!r}: the Tinker JAX backend loads a local HF folder (this machine reaches no hub); "
                      "set [tinker] base_model to one, or use smollm2")


def total_steps(knobs: TrainKnobs, n_tasks: int) -> int:
    """``[train] max_training_steps``, else ``epochs`` over the tasks in mini-batches."""
    return knobs.max_training_steps or knobs.epochs * math.ceil(n_tasks / knobs.mini_batch_size)


def served_model(plan: TrainPlan) -> str:
    """The policy's name at the sampler."""
    return plan.model.served_name or "tackroom-tinker"


@dataclass(frozen=True)
class RunScope:
    """One invocation of the loop: where it writes, where it reports, which plugins it resolves (None: the
    installed ones), whether it stops after the error-rate pass, and the console's progress bar."""

    run_dir: Path
    log: Callable[[str], None] = print
    manager: Any = None
    preflight_only: bool = False
    progress: Tracker | None = None


@dataclass
class Server:
    """What the run talks to: the bounded Tinker calls, the base model the server loads and its tokenizer, the run's
    own engine (None: the Tinker server samples) and, once connected, the Tinker service client."""

    call: TinkerCalls
    base_model: str
    tokenizer: Any
    engine: EngineSampling | None = None
    service: Any = None

    @property
    def checkpoints(self) -> Path | None:
        """Where a server this run started keeps its checkpoints (None: a server given by ``[tinker] url``)."""
        return self.call.server.state_dir / "checkpoints" if self.call.server is not None else None


@dataclass
class StepParts:
    """The parts a run builds once on a connected server and hands to the pipeline."""

    client: TrainingClient
    loss: LossChoice
    trainer: StepTrainer
    sampler: Sampler
    run_log: RunLog
    steps_total: int
    warm: SftReport | None = None
    """The ``[sft]`` warm start the RL steps continue from (None: none)."""
    warm_policy: str | None = None
    """That warm start, merged (``<run>/warm-policy``; None: none, or its export failed)."""


async def run_tinker(config: TrainConfig, run_dir: str | Path, *, manager: Any = None,
                     log: Callable[[str], None] = print, preflight_only: bool = False,
                     progress: Tracker | None = None) -> TinkerRunSummary:
    """Resolve ``config`` for this backend (:func:`~tackroom_train.plan.resolve_plan`) and train it
    (:func:`train_on_tinker`); the ``[train] trackers`` are checked first, before anything is read or started."""
    check_trackers(config.train.trackers)
    plan = resolve_plan(config, backend="tinker", manager=manager)
    scope = RunScope(Path(run_dir), log=log, manager=manager, preflight_only=preflight_only, progress=progress)
    return await train_on_tinker(plan, scope)


async def train_on_tinker(plan: TrainPlan, scope: RunScope) -> TinkerRunSummary:
    """Train the plan (blocks until done); starts and stops a Tinker server unless ``[tinker] url`` is set.

    An ``[sft]`` warm start trains first, on the run's LoRA (:mod:`.sft`); with ``then_rl = false`` the run ends
    there, its LoRA exported as ``<run>/policy``, and starts no engine. The error-rate pass (``[train]
    preflight_passes``) runs next, on the policy RL starts from, and raises :class:`PreflightRefusedError` above
    ``[train] max_error_rate``; ``scope.preflight_only`` stops after it (no step is trained, no warm start either).
    Each step's metrics go to the ``[train] trackers`` (checked here, before anything starts) and to
    ``scope.progress``."""
    from tackroom_gateway import load_tokenizer

    check_trackers(plan.train.trackers)
    scope.run_dir.mkdir(parents=True, exist_ok=True)
    settings = plan.tinker
    if settings.loss_fn == "tackroom" and settings.url is None:
        raise ConfigError("tinker.loss_fn = 'tackroom' (Tinker's custom-loss path) is wrong on SkyRL 0.4's JAX backend, "
                          "which divides each sequence's cross-entropy by the sum of its weights (negative advantages "
                          "flip sign); use 'auto' (the [loss] as the built-in it equals on-policy) or a server given "
                          "by [tinker] url whose cross-entropy is a plain weighted sum")
    if scope.preflight_only and not plan.rl:
        raise ConfigError("--preflight: this run trains only an [sft] warm start (then_rl = false) and runs no "
                          "rollouts; there is no error rate to measure")
    if plan.sft is not None and plan.sft.settings.skyrl:
        raise ConfigError("sft.skyrl: raw overrides of SkyRL's SFTConfig apply on the skyrl backend only; drop them "
                          "for backend = \"tinker\" (its warm start reads [sft] itself)")
    if plan.rl:  # a named rollout service answers before any server or engine starts
        await _check_rollout_service(plan, scope)
    loss = LossChoice.choose(plan.loss, settings.loss_fn)
    base_model = resolve_base_model(str(plan.start_from or settings.base_model or plan.model.path))
    tokenizer = load_tokenizer(plan.rollout.policy.tokenizer or plan.model.tokenizer or base_model)
    engine = None
    if settings.sampler == "engine" and plan.rl:  # the run's engine starts while the Tinker server does
        engine = EngineSampling(scope.run_dir, plan.model.served_name or "tackroom-tinker",
                                settings=_engine_settings(settings, plan.gpus.context_length, base_model),
                                keep_versions=plan.train.max_staleness_steps + 2,
                                timeout_s=settings.request_timeout_s)
    tinker_server = None if settings.url else TinkerServer(settings, base_model, scope.run_dir / "tinker")
    server = Server(TinkerCalls(settings, tinker_server), base_model, tokenizer, engine)
    engine_start = None

    def start_engine() -> None:
        nonlocal engine_start
        if engine is not None:
            scope.log(f"starting the run's vLLM engine with LoRA on port {settings.engine_port}; "
                      f"log: {_engine_log(settings.engine_port)}")
            engine_start = asyncio.ensure_future(engine.start())

    try:
        url = settings.url
        if tinker_server is not None:
            start_engine()
            scope.log(f"starting SkyRL's Tinker API server (JAX backend) on {tinker_server.url}; "
                      f"log: {tinker_server.log_path}")
            url = await asyncio.to_thread(tinker_server.start)
        else:
            await asyncio.to_thread(check_reachable, url)
            start_engine()
        if engine_start is not None:
            await engine_start
        return await _connected(plan, scope, server, loss, url)
    finally:
        if engine_start is not None and not engine_start.done():
            engine_start.cancel()
            await asyncio.gather(engine_start, return_exceptions=True)
        if engine is not None:
            await engine.stop()
        if tinker_server is not None:
            await asyncio.to_thread(tinker_server.stop)


async def _check_rollout_service(plan: TrainPlan, scope: RunScope) -> None:
    """With ``[rollout] service`` (``--rollouts``): that the service answers and takes the token, before any server
    or engine starts."""
    from tackroom_train.rollout_source import run_key, service_settings

    service = service_settings(plan.rollout, run_id=run_key(scope.run_dir))
    if service is not None:
        from tackroom_train.remote_generator import check_service

        health = await check_service(service)
        scope.log(f"rollouts: the tackroom serve at {service.url} (version {health.version}, {health.database}) runs "
                  "the trials; it calls this run's sampling endpoint"
                  + (f" as {service.policy_url}" if service.policy_url else ""))


def _engine_log(port: int) -> str:
    from tackroom_engine.engine import log_file

    return str(log_file(port))


async def _connected(plan: TrainPlan, scope: RunScope, server: Server, loss: LossChoice,
                     url: str) -> TinkerRunSummary:
    """The run on a server that answers at ``url``: the service client for its length, then :func:`_build`."""
    import tinker

    server.service = tinker.ServiceClient(base_url=url, api_key=os.environ.get("TINKER_API_KEY") or "tml-tackroom")
    try:
        return await _build(plan, scope, server, loss)
    finally:
        _close(server.service)


async def _build(plan: TrainPlan, scope: RunScope, server: Server, loss: LossChoice) -> TinkerRunSummary:
    """The trackers, the ``[sft]`` warm start, then the sampler, the trainer and the log, built once, then
    :func:`_run_steps` (or, for a warm start alone, :func:`_warm_start_only`)."""
    settings, knobs = plan.tinker, plan.train
    client = await TrainingClient.create(server.service, server.call, base_model=server.base_model,
                                         rank=settings.lora_rank)
    trackers = TrackerSet([*([scope.progress] if scope.progress is not None else []),
                           *open_trackers([] if scope.preflight_only else knobs.trackers, scope.run_dir,
                                          run_name=scope.run_dir.name, config=plan.record)], scope.log)
    try:
        warm, warm_policy = None, None
        if plan.sft is not None and not scope.preflight_only:  # before version 0 is published: RL starts from it
            warm = await warm_start(plan.sft, client, seed=knobs.seed, run_dir=scope.run_dir, log=scope.log,
                                    trackers=trackers)
            if not plan.rl:
                return await _warm_start_only(plan, scope, server, client, warm)
            warm_weights = await client.save_for_sampler("warm", "save the warm-start LoRA")
            warm_policy = (await _export(warm_weights, scope, server, name="warm-policy")).exported
        micro_batch = int(settings.backend_config.get("train_micro_batch_size") or 0)
        lr = settings.learning_rate or knobs.learning_rate
        trainer = StepTrainer(client, loss_path(loss, knobs, client, micro_batch=micro_batch),
                              aggregation=loss.aggregation, learning_rate=lr,
                              normalize_advantages=settings.normalize_advantages, micro_batch=micro_batch)
        if server.engine is not None:
            trainer.free_sample = server.engine.free_sample
        steps_total = total_steps(knobs, len(plan.rows))
        sampler = await _sampler(plan, client, server, scope.log)
        per_group = "tasks" if not plan.rollout.harnesses else "(task, harness) groups"
        scope.log(f"{plan.describe_rows()}, {steps_total} steps × {knobs.mini_batch_size} {per_group} × "
                  f"{knobs.samples_per_prompt} samples; LoRA rank {settings.lora_rank}, lr {lr:g}, loss "
                  f"{loss.describe()}; sampling on {sampler.describe()}, staleness ≤ {knobs.max_staleness_steps}"
                  + ("; from the [sft] warm start" if warm is not None else ""))
        trackers.start(steps_total)
        run_log = RunLog(scope.run_dir, steps_total=steps_total, max_staleness=knobs.max_staleness_steps,
                         mismatch_warn=knobs.logprob_mismatch_warn, log=scope.log, trackers=trackers,
                         harnesses=plan.rollout.harness_labels)
        parts = StepParts(client, loss, trainer, sampler, run_log, steps_total, warm,
                          warm_policy.path if warm_policy is not None else None)
        return await _run_steps(plan, scope, server, parts)
    finally:
        trackers.close()


async def _warm_start_only(plan: TrainPlan, scope: RunScope, server: Server, client: TrainingClient,
                           warm: SftReport) -> TinkerRunSummary:
    """An ``[sft]`` run with ``then_rl = false``: the warm LoRA saved and exported as ``<run>/policy`` (what
    ``[model] init_from`` starts a later run from), and the summary."""
    final_weights = await client.save_for_sampler("final", "save the warm-start LoRA")
    final = await _export(final_weights, scope, server)
    summary = TinkerRunSummary(run_dir=str(scope.run_dir), steps=0, first_reward=0.0, last_reward=0.0,
                               best_reward=0.0, mismatch_mean=None, mismatch_warnings=0, curve_csv="", curve_png="",
                               sampler=plan.tinker.sampler, sft=warm, **_policy_fields(scope.run_dir, final))
    (scope.run_dir / "summary.json").write_text(summary.model_dump_json(indent=2))
    _mark_latest(scope, final)
    return summary


async def _run_steps(plan: TrainPlan, scope: RunScope, server: Server, parts: StepParts) -> TinkerRunSummary:
    """The preflight, the pipeline's steps, the final save and the export, with the sampler entered."""
    from tackroom_train.rollout_source import rollout_generator, run_key

    knobs = plan.train
    async with parts.sampler:
        preflight = None
        if knobs.preflight_passes or scope.preflight_only:
            preflight = await _preflight(plan, scope, server, parts.sampler)
            if scope.preflight_only:
                return TinkerRunSummary(run_dir=str(scope.run_dir), steps=0, first_reward=0.0, last_reward=0.0,
                                        best_reward=0.0, mismatch_mean=None, mismatch_warnings=0, curve_csv="",
                                        curve_png="", preflight=preflight, sampler=plan.tinker.sampler)
        generator = rollout_generator(plan.rollout, run_id=run_key(scope.run_dir), phase="train",
                                      base_url=parts.sampler.base_url, tokenizer=server.tokenizer,
                                      model=served_model(plan), run_root=scope.run_dir / "rollouts",
                                      manager=scope.manager)
        rollouts = Rollouts(generator, parts.sampler, task_batches(plan.rows, knobs.mini_batch_size, knobs.seed),
                            samples_per_prompt=knobs.samples_per_prompt, temperature=knobs.temperature,
                            max_generate_length=knobs.max_generate_length, resample_rounds=knobs.resample_rounds)
        try:
            await run_pipeline(steps=parts.steps_total, max_staleness=knobs.max_staleness_steps, rollout=rollouts,
                               train=parts.trainer.train, publish=parts.sampler.publish, on_step=parts.run_log.step,
                               on_drop=parts.run_log.drop, oldest_version=lambda batch: batch.oldest_version)
            final_weights = await parts.client.save_for_sampler("final", "save the final LoRA")
        finally:
            await generator.aclose()

    final = await _export(final_weights, scope, server)
    png = parts.run_log.finish(title=f"{scope.run_dir.name}: {parts.loss.describe()}")
    summary = _summary(plan, parts.run_log, png, final, preflight)
    summary.sft, summary.warm_policy = parts.warm, parts.warm_policy
    (scope.run_dir / "summary.json").write_text(summary.model_dump_json(indent=2))
    _mark_latest(scope, final)
    return summary


def _mark_latest(scope: RunScope, final: FinalPolicy) -> None:
    """``<out>/latest`` → this run, when it wrote a policy."""
    if final.exported is not None:
        latest = mark_latest(scope.run_dir)
        if latest is not None:
            scope.log(f"{latest} -> {scope.run_dir.name}")


async def _sampler(plan: TrainPlan, client: TrainingClient, server: Server, log: Callable[[str], None]) -> Sampler:
    """The ``[tinker] sampler``: the run's engine (started by :func:`train_on_tinker`) or the Tinker server's own."""
    settings = plan.tinker
    if server.engine is not None:
        return EngineSampler(server.engine, client, port=settings.engine_port, service=server.service,
                             checkpoints=server.checkpoints, log=log)
    return await JaxSampler.create(client, server.tokenizer, served_model(plan),
                                   max_model_len=plan.gpus.context_length, timeout_s=settings.request_timeout_s,
                                   max_staleness=plan.train.max_staleness_steps)


async def _preflight(plan: TrainPlan, scope: RunScope, server: Server, sampler: Sampler) -> PreflightReport:
    """The error-rate pass on version 0 (``[train] preflight_passes``); :class:`PreflightRefusedError` above
    ``[train] max_error_rate``."""
    from tackroom_train.rollout_source import rollout_generator, run_key

    knobs = plan.train
    checker = rollout_generator(plan.rollout, run_id=run_key(scope.run_dir), phase="preflight",
                                base_url=sampler.base_url, tokenizer=server.tokenizer, model=served_model(plan),
                                run_root=scope.run_dir / "preflight", manager=scope.manager)
    try:
        preflight = await error_rate_pass(
            checker, plan.rows, passes=knobs.preflight_passes or 1, max_error_rate=knobs.max_error_rate,
            temperature=knobs.temperature, max_generate_length=knobs.max_generate_length, run_dir=scope.run_dir,
            log=scope.log)
    finally:
        await checker.aclose()
    await sampler.check("the error-rate pass")
    if not preflight.passed:
        raise PreflightRefusedError(
            f"{preflight.describe()}\nnot training: fix what fails (the trials are under {preflight.folder}) "
            "or raise [train] max_error_rate knowingly")
    return preflight


@dataclass
class FinalPolicy:
    """The run's end: the final LoRA's ``tinker://`` path and its export (``exported``), or why there is none."""

    final_weights: str | None
    exported: PolicyFolder | None = None
    error: str | None = None


def _policy_fields(run_dir: Path, final: FinalPolicy) -> dict[str, Any]:
    """The summary's fields of the run's final LoRA and its export (or why there is none)."""
    exported = final.exported
    return {"final_weights": final.final_weights, "adapter": exported.adapter if exported else None,
            "policy": exported.path if exported else None, "served_name": run_dir.name if exported else None,
            "serve_command": serve_command(exported.path, name=run_dir.name) if exported else None,
            "policy_error": final.error}


def _summary(plan: TrainPlan, run_log: RunLog, png: Path, final: FinalPolicy,
             preflight: PreflightReport | None) -> TinkerRunSummary:
    run_dir, records, rewards = run_log.run_dir, run_log.records, run_log.rewards
    return TinkerRunSummary(
        run_dir=str(run_dir), steps=len(records), first_reward=rewards[0] if rewards else 0.0,
        last_reward=rewards[-1] if rewards else 0.0, best_reward=max(rewards, default=0.0),
        mismatch_mean=run_log.mismatch_mean, mismatch_warnings=run_log.warnings,
        mismatch_warn=plan.train.logprob_mismatch_warn,
        curve_csv=str(run_log.curve_csv), curve_png=str(png), **_policy_fields(run_dir, final),
        preflight=preflight, reward_per_step=rewards, harnesses=run_log.harnesses,
        reward_per_harness_per_step=run_log.harness_rewards(),
        mismatch_per_step=[r.mismatch_mean for r in records], sampler=plan.tinker.sampler,
        staleness_per_step=[r.staleness for r in records], dropped_batches=run_log.dropped,
        handoff_s_per_step=[r.handoff_s for r in records])


def _engine_settings(settings: TinkerSettings, context_length: int, base_model: str) -> Any:
    """The run's own engine: the base model with LoRA up to the trainer's rank, on ``[tinker] engine_port``."""
    from tackroom_engine import EngineSettings, model_dir

    own = Path(base_model).resolve() == model_dir().resolve()  # SmolLM2: served with tackroom's tools template
    return EngineSettings(port=settings.engine_port, model=None if own else base_model, served_name="tackroom-base",
                          max_model_len=context_length, kv_cache_gib=settings.engine_kv_cache_gib,
                          lora_rank=settings.lora_rank, max_loras=settings.engine_max_loras,
                          start_timeout_sec=settings.engine_start_timeout_s)


def _close(service: Any) -> None:
    """Stop the client's session heartbeat: with the run's server stopped, a live one would print "Session heartbeat
    failed … Tinker is down" every 10 s for the rest of the process (the next arm of a sweep, its evaluation).
    tinker 0.25's ServiceClient has no public close; its holders do."""
    for holder in (getattr(service, "_session_holder", None), getattr(service, "_rest_holder", None)):
        if holder is not None:
            holder.close()


async def _export(final_weights: str | None, scope: RunScope, server: Server, *, name: str = "policy") -> FinalPolicy:
    """The final LoRA as ``<run>/adapter`` and, merged into the base, ``<run>/policy``; or why not. ``name``
    ``warm-policy``: the warm start's, before RL (``<run>/warm-policy-adapter``, ``<run>/warm-policy``)."""
    what = "trained policy" if name == "policy" else "warm-start policy"
    if not final_weights:
        return FinalPolicy(final_weights, error=f"the server answered the save of the {what} with no checkpoint path")
    try:
        exported = await server.call(f"export the {what}", export_policy(
            final_weights, scope.run_dir, server.base_model,
            chat_template=getattr(server.tokenizer, "chat_template", None), checkpoints=server.checkpoints,
            service=server.service, name=name))
    except (PolicyExportError, InfraError) as exc:
        scope.log(f"ERROR: the {what} could not be written to {scope.run_dir / name}: {exc}")
        return FinalPolicy(final_weights, error=str(exc))
    scope.log(f"{what}: {exported.path} (base {exported.base_model} + LoRA rank {exported.rank}, "
              f"scale {exported.scale:g}, {exported.merged_modules} layers merged)")
    return FinalPolicy(final_weights, exported)
