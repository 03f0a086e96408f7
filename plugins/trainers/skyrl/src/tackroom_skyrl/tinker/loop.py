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

:func:`.pipeline.run_pipeline` drives them: rollouts for the next step run while a step trains, up to
``[train] max_staleness_steps`` versions behind; a batch staler than that is dropped, never trained on.
:class:`~.run_log.RunLog` records each step (:class:`~.records.StepRecord`) into ``steps.jsonl``, each row's
version and staleness into ``trajectories.jsonl``, and the curve into ``reward_curve.csv`` and
``reward_curve.png``; the trainer-vs-rollout logprob mismatch is warned above ``[train] logprob_mismatch_warn``.

After the last step the final LoRA is saved (``save_weights_for_sampler``) and
:mod:`.policy` turns it into ``<run>/adapter/`` (the PEFT adapter) and
``<run>/policy/``: the LoRA merged into the base, an HF folder ``tackroom model
up --model`` serves; ``summary.json`` records both and the command.
"""

from __future__ import annotations

import asyncio
import math
import os
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel

from tackroom import ConfigError, InfraError
from tackroom_skyrl.arms import EvalRow
from tackroom_skyrl.config import TrainConfig
from tackroom_skyrl.dataset import prompt_rows
from tackroom_skyrl.error_rate import PreflightRefusedError, PreflightReport, error_rate_pass
from tackroom_skyrl.mismatch import mismatch_threshold
from tackroom_skyrl.tinker.client import TrainingClient
from tackroom_skyrl.tinker.engine_sampling import EngineSampling
from tackroom_skyrl.tinker.pipeline import run_pipeline
from tackroom_skyrl.tinker.policy import PolicyExportError, PolicyFolder, export_policy, mark_latest, serve_command
from tackroom_skyrl.tinker.rollouts import Rollouts, task_batches
from tackroom_skyrl.tinker.run_log import RunLog
from tackroom_skyrl.tinker.sampler import EngineSampler, JaxSampler, Sampler
from tackroom_skyrl.tinker.server import TinkerCalls, TinkerServer, check_reachable
from tackroom_skyrl.tinker.step_trainer import LossChoice, StepTrainer, loss_path
from tackroom_skyrl.tracking import Tracker, TrackerSet, check_trackers, open_trackers


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
    reward_per_step: list[float] = []
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
    """The ``[eval]`` table: the served final policy under each eval harness (tackroom_skyrl.sweep)."""


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


def describe_loss(config: TrainConfig, manager: Any = None) -> str:
    """What the step minimises, in words: the ``[loss]``, its aggregation and how it reaches the server."""
    return LossChoice.from_config(config, manager).describe()


def total_steps(config: TrainConfig, n_tasks: int) -> int:
    return config.train.max_training_steps or config.train.epochs * math.ceil(n_tasks / config.train.mini_batch_size)


async def run_tinker(config: TrainConfig, run_dir: str | Path, *, manager: Any = None,
                     log: Callable[[str], None] = print, preflight_only: bool = False,
                     progress: Tracker | None = None) -> TinkerRunSummary:
    """Train (blocks until done); starts and stops a Tinker server unless ``[tinker] url`` is set.

    The error-rate pass (``[train] preflight_passes``) runs first and raises :class:`PreflightRefusedError`
    above ``[train] max_error_rate``; ``preflight_only`` stops after it (no step is trained). Each step's metrics
    go to the ``[train] trackers`` (checked here, before anything starts) and to ``progress`` (the console's bar)."""
    from tackroom_gateway import load_tokenizer

    check_trackers(config.train.trackers)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    settings = config.tinker
    if settings.loss_fn == "tackroom" and settings.url is None:
        raise ConfigError("tinker.loss_fn = 'tackroom' (Tinker's custom-loss path) is wrong on SkyRL 0.4's JAX backend, "
                          "which divides each sequence's cross-entropy by the sum of its weights (negative advantages "
                          "flip sign); use 'auto' (the [loss] as the built-in it equals on-policy) or a server given "
                          "by [tinker] url whose cross-entropy is a plain weighted sum")
    loss = LossChoice.from_config(config, manager)
    # the threshold in effect, written back so the summary, the log and whoever holds the config agree
    config.train.logprob_mismatch_warn = mismatch_threshold(config.train, on_engine=settings.sampler == "engine")
    base_model = resolve_base_model(settings.base_model or config.model.path)
    rows = prompt_rows(config.tasks, config.include, config.exclude)
    tokenizer = load_tokenizer(config.policy.tokenizer or config.model.tokenizer or base_model)
    server = None
    url = settings.url
    engine = None
    engine_start = None
    if settings.sampler == "engine":  # the run's engine starts while the Tinker server does
        engine = EngineSampling(run_dir, config.model.served_name or "tackroom-tinker",
                                settings=_engine_settings(config, base_model),
                                keep_versions=config.train.max_staleness_steps + 2,
                                timeout_s=settings.request_timeout_s)

    def start_engine() -> None:
        nonlocal engine_start
        if engine is not None:
            log(f"starting the run's vLLM engine with LoRA on port {settings.engine_port}; "
                f"log: {_engine_log(settings.engine_port)}")
            engine_start = asyncio.ensure_future(engine.start())

    try:
        if url is None:
            server = TinkerServer(settings, base_model, run_dir / "tinker")
            start_engine()
            log(f"starting SkyRL's Tinker API server (JAX backend) on {server.url}; log: {server.log_path}")
            url = await asyncio.to_thread(server.start)
        else:
            await asyncio.to_thread(check_reachable, url)
            start_engine()
        if engine_start is not None:
            await engine_start
        return await _train(config, run_dir, TinkerCalls(settings, server), url, base_model, rows, tokenizer, loss,
                            manager, log, preflight_only, engine, progress)
    finally:
        if engine_start is not None and not engine_start.done():
            engine_start.cancel()
            await asyncio.gather(engine_start, return_exceptions=True)
        if engine is not None:
            await engine.stop()
        if server is not None:
            await asyncio.to_thread(server.stop)


def _engine_log(port: int) -> str:
    from tackroom_engine.engine import log_file

    return str(log_file(port))


async def _train(config: TrainConfig, run_dir: Path, call: TinkerCalls, url: str, base_model: str,
                 rows: list[dict[str, Any]], tokenizer: Any, loss: LossChoice, manager: Any,
                 log: Callable[[str], None], preflight_only: bool = False,
                 engine: EngineSampling | None = None, progress: Tracker | None = None) -> TinkerRunSummary:
    import tinker

    service = tinker.ServiceClient(base_url=url, api_key=os.environ.get("TINKER_API_KEY") or "tml-tackroom")
    try:
        return await _train_with(config, run_dir, call, service, base_model, rows, tokenizer, loss, manager, log,
                                 preflight_only, engine, progress)
    finally:
        _close(service)


async def _train_with(config: TrainConfig, run_dir: Path, call: TinkerCalls, service: Any, base_model: str,
                      rows: list[dict[str, Any]], tokenizer: Any, loss: LossChoice, manager: Any,
                      log: Callable[[str], None], preflight_only: bool = False,
                      engine: EngineSampling | None = None, progress: Tracker | None = None) -> TinkerRunSummary:
    """The run on a server that answers: the sampler, the trainer and the log built once, then the pipeline."""
    settings, knobs = config.tinker, config.train
    client = await TrainingClient.create(service, call, base_model=base_model, rank=settings.lora_rank)
    micro_batch = int(settings.backend_config.get("train_micro_batch_size") or 0)
    lr = settings.learning_rate or knobs.learning_rate
    trainer = StepTrainer(client, loss_path(loss, knobs, client, micro_batch=micro_batch),
                          aggregation=loss.aggregation, learning_rate=lr,
                          normalize_advantages=settings.normalize_advantages, micro_batch=micro_batch)
    if engine is not None:
        trainer.free_sample = engine.free_sample
    model_name = config.model.served_name or "tackroom-tinker"
    steps_total = total_steps(config, len(rows))
    sampler = await _sampler(config, client, service, tokenizer, model_name, engine, log)
    log(f"{len(rows)} tasks, {steps_total} steps × {knobs.mini_batch_size} tasks × {knobs.samples_per_prompt} samples; "
        f"LoRA rank {settings.lora_rank}, lr {lr:g}, loss {loss.describe()}; sampling on {sampler.describe()}, "
        f"staleness ≤ {knobs.max_staleness_steps}")

    trackers = TrackerSet([*([progress] if progress is not None else []),
                           *open_trackers([] if preflight_only else knobs.trackers, run_dir, run_name=run_dir.name,
                                          config=config.model_dump(mode="json", exclude={"arms", "eval"}))], log)
    trackers.start(steps_total)
    run_log = RunLog(run_dir, steps_total=steps_total, max_staleness=knobs.max_staleness_steps,
                     mismatch_warn=knobs.logprob_mismatch_warn, log=log, trackers=trackers)
    try:
        return await _run_steps(config, run_dir, call, service, base_model, rows, tokenizer, loss, manager, log,
                                preflight_only, sampler, trainer, client, run_log, steps_total, model_name)
    finally:
        trackers.close()


async def _run_steps(config: TrainConfig, run_dir: Path, call: TinkerCalls, service: Any, base_model: str,
                     rows: list[dict[str, Any]], tokenizer: Any, loss: LossChoice, manager: Any,
                     log: Callable[[str], None], preflight_only: bool, sampler: Sampler, trainer: StepTrainer,
                     client: TrainingClient, run_log: RunLog, steps_total: int, model_name: str) -> TinkerRunSummary:
    """The preflight, the pipeline's steps, the final save and the export, with the sampler entered."""
    from tackroom_skyrl.generator import TackroomGenerator

    settings, knobs = config.tinker, config.train
    async with sampler:
        preflight = None
        if knobs.preflight_passes or preflight_only:
            preflight = await _preflight(config, run_dir, sampler, rows, tokenizer, model_name, manager, log)
            if preflight_only:
                return TinkerRunSummary(run_dir=str(run_dir), steps=0, first_reward=0.0, last_reward=0.0,
                                        best_reward=0.0, mismatch_mean=None, mismatch_warnings=0, curve_csv="",
                                        curve_png="", preflight=preflight, sampler=settings.sampler)
        generator = TackroomGenerator(config, base_url=sampler.base_url, tokenizer=tokenizer, model=model_name,
                                      run_root=run_dir / "rollouts", manager=manager)
        rollouts = Rollouts(generator, sampler, task_batches(rows, knobs.mini_batch_size, knobs.seed),
                            samples_per_prompt=knobs.samples_per_prompt, temperature=knobs.temperature,
                            max_generate_length=knobs.max_generate_length, resample_rounds=knobs.resample_rounds)
        try:
            await run_pipeline(steps=steps_total, max_staleness=knobs.max_staleness_steps, rollout=rollouts,
                               train=trainer.train, publish=sampler.publish, on_step=run_log.step,
                               on_drop=run_log.drop)
            final_weights = await client.save_for_sampler("final", "save the final LoRA")
        finally:
            await generator.aclose()

    exported, policy_error = await _export(final_weights, run_dir, base_model, tokenizer, call, service, log)
    png = run_log.finish(title=f"{run_dir.name}: {loss.describe()}")
    summary = _summary(config, run_log, png, final_weights, exported, policy_error, preflight)
    (run_dir / "summary.json").write_text(summary.model_dump_json(indent=2))
    if exported is not None:
        latest = mark_latest(run_dir)
        if latest is not None:
            log(f"{latest} -> {run_dir.name}")
    return summary


async def _sampler(config: TrainConfig, client: TrainingClient, service: Any, tokenizer: Any, model_name: str,
                  engine: EngineSampling | None, log: Callable[[str], None]) -> Sampler:
    """The ``[tinker] sampler``: the run's engine (started by :func:`run_tinker`) or the Tinker server's own."""
    settings = config.tinker
    if engine is not None:
        checkpoints = client.call.server.state_dir / "checkpoints" if client.call.server is not None else None
        return EngineSampler(engine, client, port=settings.engine_port, service=service, checkpoints=checkpoints,
                             log=log)
    return await JaxSampler.create(client, tokenizer, model_name, max_model_len=config.gpus.context_length,
                                   timeout_s=settings.request_timeout_s,
                                   max_staleness=config.train.max_staleness_steps)


async def _preflight(config: TrainConfig, run_dir: Path, sampler: Sampler, rows: list[dict[str, Any]], tokenizer: Any,
                     model_name: str, manager: Any, log: Callable[[str], None]) -> PreflightReport:
    """The error-rate pass on version 0 (``[train] preflight_passes``); :class:`PreflightRefusedError` above
    ``[train] max_error_rate``."""
    from tackroom_skyrl.generator import TackroomGenerator

    knobs = config.train
    checker = TackroomGenerator(config, base_url=sampler.base_url, tokenizer=tokenizer, model=model_name,
                                run_root=run_dir / "preflight", manager=manager)
    try:
        preflight = await error_rate_pass(
            checker, rows, passes=knobs.preflight_passes or 1, max_error_rate=knobs.max_error_rate,
            temperature=knobs.temperature, max_generate_length=knobs.max_generate_length, run_dir=run_dir, log=log)
    finally:
        await checker.aclose()
    await sampler.check("the error-rate pass")
    if not preflight.passed:
        raise PreflightRefusedError(
            f"{preflight.describe()}\nnot training: fix what fails (the trials are under {preflight.folder}) "
            "or raise [train] max_error_rate knowingly")
    return preflight


def _summary(config: TrainConfig, run_log: RunLog, png: Path, final_weights: str | None,
             exported: PolicyFolder | None, policy_error: str | None,
             preflight: PreflightReport | None) -> TinkerRunSummary:
    run_dir, records, rewards = run_log.run_dir, run_log.records, run_log.rewards
    return TinkerRunSummary(
        run_dir=str(run_dir), steps=len(records), first_reward=rewards[0] if rewards else 0.0,
        last_reward=rewards[-1] if rewards else 0.0, best_reward=max(rewards, default=0.0),
        mismatch_mean=run_log.mismatch_mean, mismatch_warnings=run_log.warnings,
        mismatch_warn=config.train.logprob_mismatch_warn,
        curve_csv=str(run_log.curve_csv), curve_png=str(png), final_weights=final_weights,
        adapter=exported.adapter if exported else None, policy=exported.path if exported else None,
        served_name=run_dir.name if exported else None,
        serve_command=serve_command(exported.path, name=run_dir.name) if exported else None,
        policy_error=policy_error, preflight=preflight, reward_per_step=rewards,
        mismatch_per_step=[r.mismatch_mean for r in records], sampler=config.tinker.sampler,
        staleness_per_step=[r.staleness for r in records], dropped_batches=run_log.dropped,
        handoff_s_per_step=[r.handoff_s for r in records])


def _engine_settings(config: TrainConfig, base_model: str) -> Any:
    """The run's own engine: the base model with LoRA up to the trainer's rank, on ``[tinker] engine_port``."""
    from tackroom_engine import EngineSettings, model_dir

    t = config.tinker
    own = Path(base_model).resolve() == model_dir().resolve()  # SmolLM2: served with tackroom's tools template
    return EngineSettings(port=t.engine_port, model=None if own else base_model, served_name="tackroom-base",
                          max_model_len=config.gpus.context_length, kv_cache_gib=t.engine_kv_cache_gib,
                          lora_rank=t.lora_rank, max_loras=t.engine_max_loras,
                          start_timeout_sec=t.engine_start_timeout_s)


def _close(service: Any) -> None:
    """Stop the client's session heartbeat: with the run's server stopped, a live one would print "Session heartbeat
    failed … Tinker is down" every 10 s for the rest of the process (the next arm of a sweep, its evaluation).
    tinker 0.25's ServiceClient has no public close; its holders do."""
    for holder in (getattr(service, "_session_holder", None), getattr(service, "_rest_holder", None)):
        if holder is not None:
            holder.close()


async def _export(final_weights: str | None, run_dir: Path, base_model: str, tokenizer: Any, call: TinkerCalls,
                  service: Any, log: Callable[[str], None]) -> tuple[PolicyFolder | None, str | None]:
    """The final LoRA as ``<run>/adapter`` and, merged into the base, ``<run>/policy``; (folder, None) or (None, why)."""
    if not final_weights:
        return None, "the server answered the final save with no checkpoint path"
    checkpoints = call.server.state_dir / "checkpoints" if call.server is not None else None
    try:
        exported = await call("export the trained policy", export_policy(
            final_weights, run_dir, base_model, chat_template=getattr(tokenizer, "chat_template", None),
            checkpoints=checkpoints, service=service))
    except (PolicyExportError, InfraError) as exc:
        log(f"ERROR: the trained policy could not be written to {run_dir / 'policy'}: {exc}")
        return None, str(exc)
    log(f"trained policy: {exported.path} (base {exported.base_model} + LoRA rank {exported.rank}, "
        f"scale {exported.scale:g}, {exported.merged_modules} layers merged)")
    return exported, None
