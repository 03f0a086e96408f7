"""The RL loop of ``tackroom train --backend tinker``.

Why a loop of our own (thin, on purpose): tinker-cookbook's RL loop drives
its own token-level ``Env`` objects, and SkyRL's trainer needs GPUs and vLLM;
ours must drive *harnesses* — agent loops that speak HTTP to an
OpenAI-compatible engine inside sandboxes — through the trial runtime, exactly
as the GPU backend does. So each step is:

1. rollouts: ``TackroomGenerator.generate`` (the same generator SkyRL's trainer
   calls: trial runtime, harness, sandbox, verifier, masking rules). With
   ``[tinker] sampler = "engine"`` (default) they sample on the run's own vLLM
   engine with the current LoRA (:mod:`.engine_sampling`); with ``"tinker"``
   on :class:`~.sampling_endpoint.SamplingEndpoint` over the Tinker sampling
   client. Either way the exact token ids and logprobs come back;
2. GRPO advantages per task group; masked rows train nothing;
3. ``forward_backward`` with the loss (:mod:`.datums`; with ``[train]
   tis_ratio_type`` a ``forward`` first gives π_old for truncated importance
   sampling), then ``optim_step`` (Adam on the LoRA weights). A step where every
   group's rewards are equal has no learning signal (every advantage is 0) and
   takes no optimiser step: with a zero gradient, Adam would still move the
   weights along its stale momentum, and a task the policy had solved drifts back;
4. the hand-off: the new weights become the sampler's (saved and loaded into the
   engine as the next policy version) before any batch samples with them.

Steps run through :mod:`.pipeline`: rollouts for the next step run while a step
trains, up to ``[train] max_staleness_steps`` versions behind; a batch staler
than that is dropped, never trained on. Every trajectory's version and
staleness goes to ``trajectories.jsonl``.

After the last step the final LoRA is saved (``save_weights_for_sampler``) and
:mod:`.policy` turns it into ``<run>/adapter/`` (the PEFT adapter) and
``<run>/policy/``: the LoRA merged into the base, an HF folder ``tackroom model
up --model`` serves; ``summary.json`` records both and the command.

Each step records mean reward (and per task), trained/masked trials, the
trainer-vs-rollout logprob mismatch (warned above ``[train] logprob_mismatch_warn``),
the loss and timings into ``steps.jsonl``; at the end (and after every step)
``reward_curve.csv`` and ``reward_curve.png``.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import time
from collections import defaultdict
from pathlib import Path
from statistics import mean
from types import SimpleNamespace
from typing import Any, Callable

from pydantic import BaseModel

from tackroom import ConfigError, InfraError
from tackroom.app import get_plugin_manager
from tackroom_skyrl.arms import EvalRow
from tackroom_skyrl.config import TrainConfig
from tackroom_skyrl.dataset import prompt_rows
from tackroom_skyrl.error_rate import PreflightRefusedError, PreflightReport, error_rate_pass
from tackroom_skyrl.mismatch import mismatch_threshold, mismatch_warning
from tackroom_skyrl.tinker import curve
from tackroom_skyrl.tinker.datums import (
    TackroomLoss,
    batch_from_output,
    datums,
    grpo_advantages,
    mismatch,
    reduced_loss,
    server_loss,
    tis_ratios,
)
from tackroom_skyrl.tinker.engine_sampling import EngineSampling
from tackroom_skyrl.tinker.pipeline import EngineSamplingError, Sampled, Trained, run_pipeline
from tackroom_skyrl.tinker.policy import (
    PolicyExportError,
    PolicyFolder,
    download_archive,
    export_policy,
    mark_latest,
    sampler_archive,
    serve_command,
)
from tackroom_skyrl.tinker.sampling_endpoint import SamplingEndpoint, constraint_error
from tackroom_skyrl.tinker.server import TinkerCalls, TinkerServer, check_reachable


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


async def _result(submitted: Any) -> Any:
    """Await a Tinker ``*_async`` call's future, then its result."""
    return await (await submitted).result_async()


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


def _loss(config: TrainConfig, manager: Any) -> tuple[Any, Any, str, str, dict[str, float] | None]:
    """(spec, options, aggregation, server loss_fn, its loss_fn_config) of the ``[loss]`` and ``[tinker] loss_fn``."""
    manager = manager or get_plugin_manager()
    spec = manager.get("loss", config.loss.name)
    options = spec.Options(**config.loss.options) if config.loss.options else spec.Options()
    loss_fn, loss_fn_config = config.tinker.loss_fn, None
    if loss_fn == "auto":
        try:
            loss_fn, loss_fn_config = server_loss(spec.name, options)
        except ValueError as exc:
            raise ConfigError(f"loss.name: {exc}") from None
    return spec, options, config.loss.aggregation or spec.aggregation, loss_fn, loss_fn_config


def describe_loss(config: TrainConfig, manager: Any = None) -> str:
    """What the step minimises, in words: the ``[loss]``, its aggregation and how it reaches the server."""
    return _describe(_loss(config, manager))


def _describe(loss: tuple[Any, ...]) -> str:
    spec, _, aggregation, loss_fn, loss_fn_config = loss
    how = "in torch, Tinker's custom-loss path" if loss_fn == "tackroom" else f"as Tinker's {loss_fn}"
    extra = f" {loss_fn_config}" if loss_fn_config else ""
    return f"{spec.name}, {aggregation} ({how}{extra})"


def _batches(rows: list[dict[str, Any]], size: int, seed: int):
    """Mini-batches of tasks, a fresh shuffle every epoch."""
    rng = random.Random(seed)
    while True:
        order = list(rows)
        rng.shuffle(order)
        for i in range(0, len(order), size):
            yield order[i:i + size]


def total_steps(config: TrainConfig, n_tasks: int) -> int:
    return config.train.max_training_steps or config.train.epochs * math.ceil(n_tasks / config.train.mini_batch_size)


async def run_tinker(config: TrainConfig, run_dir: str | Path, *, manager: Any = None,
                     log: Callable[[str], None] = print, preflight_only: bool = False) -> TinkerRunSummary:
    """Train (blocks until done); starts and stops a Tinker server unless ``[tinker] url`` is set.

    The error-rate pass (``[train] preflight_passes``) runs first and raises :class:`PreflightRefusedError`
    above ``[train] max_error_rate``; ``preflight_only`` stops after it (no step is trained)."""
    from tackroom_gateway import load_tokenizer

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    settings = config.tinker
    if settings.loss_fn == "tackroom" and settings.url is None:
        raise ConfigError("tinker.loss_fn = 'tackroom' (Tinker's custom-loss path) is wrong on SkyRL 0.4's JAX backend, "
                          "which divides each sequence's cross-entropy by the sum of its weights (negative advantages "
                          "flip sign); use 'auto' (the [loss] as the built-in it equals on-policy) or a server given "
                          "by [tinker] url whose cross-entropy is a plain weighted sum")
    loss = _loss(config, manager)
    # the threshold in effect, written back so the summary, the log and whoever holds the config agree
    config.train.logprob_mismatch_warn = mismatch_threshold(config.train, on_engine=settings.sampler == "engine")
    base_model = resolve_base_model(settings.base_model or config.model.path)
    rows = prompt_rows(config.tasks, config.include, config.exclude)
    tokenizer = load_tokenizer(config.policy.tokenizer or config.model.tokenizer or base_model)
    server = None
    url = settings.url
    sampling = None
    engine_start = None
    if settings.sampler == "engine":  # the run's engine starts while the Tinker server does
        sampling = EngineSampling(run_dir, config.model.served_name or "tackroom-tinker",
                                  settings=_engine_settings(config, base_model),
                                  keep_versions=config.train.max_staleness_steps + 2,
                                  timeout_s=settings.request_timeout_s)

    def start_engine() -> None:
        nonlocal engine_start
        if sampling is not None:
            log(f"starting the run's vLLM engine with LoRA on port {settings.engine_port}; "
                f"log: {_engine_log(settings.engine_port)}")
            engine_start = asyncio.ensure_future(sampling.start())

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
                            manager, log, preflight_only, sampling)
    finally:
        if engine_start is not None and not engine_start.done():
            engine_start.cancel()
            await asyncio.gather(engine_start, return_exceptions=True)
        if sampling is not None:
            await sampling.stop()
        if server is not None:
            await asyncio.to_thread(server.stop)


def _engine_log(port: int) -> str:
    from tackroom_engine.engine import log_file

    return str(log_file(port))


async def _train(config: TrainConfig, run_dir: Path, call: TinkerCalls, url: str, base_model: str,
                 rows: list[dict[str, Any]], tokenizer: Any, loss: tuple[Any, ...], manager: Any,
                 log: Callable[[str], None], preflight_only: bool = False,
                 sampling: EngineSampling | None = None) -> TinkerRunSummary:
    import tinker

    service = tinker.ServiceClient(base_url=url, api_key=os.environ.get("TINKER_API_KEY") or "tml-tackroom")
    try:
        return await _train_with(config, run_dir, call, service, base_model, rows, tokenizer, loss, manager, log,
                                 preflight_only, sampling)
    finally:
        _close(service)


async def _train_with(config: TrainConfig, run_dir: Path, call: TinkerCalls, service: Any, base_model: str,
                      rows: list[dict[str, Any]], tokenizer: Any, loss: tuple[Any, ...], manager: Any,
                      log: Callable[[str], None], preflight_only: bool = False,
                      sampling: EngineSampling | None = None) -> TinkerRunSummary:
    from skyrl.train.generators.base import TrajectoryID
    from tinker import types

    from tackroom_skyrl.generator import TackroomGenerator

    settings, knobs = config.tinker, config.train
    spec, options, aggregation, loss_fn, loss_fn_config = loss
    lr = settings.learning_rate or knobs.learning_rate
    training = await call("create the LoRA training client",
                          service.create_lora_training_client_async(base_model=base_model, rank=settings.lora_rank))
    model_name = config.model.served_name or "tackroom-tinker"
    steps_total = total_steps(config, len(rows))
    batches = _batches(rows, knobs.mini_batch_size, knobs.seed)
    records: list[dict[str, Any]] = []
    counts = {"warnings": 0, "dropped": 0}
    final_weights: str | None = None
    loss_label = _describe(loss)
    on_engine = settings.sampler == "engine"
    micro_batch = int(settings.backend_config.get("train_micro_batch_size") or 0)
    if knobs.tis_ratio_type and loss_fn == "tackroom":
        raise ConfigError("[train] tis_ratio_type applies to Tinker's built-in losses; tinker.loss_fn = 'tackroom' "
                          "runs the loss itself (set loss_fn = 'auto' or drop tis_ratio_type)")
    log(f"{len(rows)} tasks, {steps_total} steps × {knobs.mini_batch_size} tasks × {knobs.samples_per_prompt} samples; "
        f"LoRA rank {settings.lora_rank}, lr {lr:g}, loss {loss_label}; sampling on "
        f"{'the vLLM engine (port %d) with the live LoRA' % settings.engine_port if on_engine else 'the Tinker sampler'}, "
        f"staleness ≤ {knobs.max_staleness_steps}")

    samplers: dict[int, Any] = {}
    if on_engine:
        endpoint: Any = sampling or EngineSampling(run_dir, model_name, settings=_engine_settings(config, base_model),
                                                   keep_versions=knobs.max_staleness_steps + 2,
                                                   timeout_s=settings.request_timeout_s)
    else:
        samplers[0] = await call("save weights for sampling", training.save_weights_and_get_sampling_client_async())
        endpoint = SamplingEndpoint(samplers[0], tokenizer, model_name, max_model_len=config.gpus.context_length,
                                    timeout_s=settings.request_timeout_s)
    checkpoints = call.server.state_dir / "checkpoints" if call.server is not None else None

    async def publish(version: int) -> float:
        """Version ``version`` of the weights becomes the sampler's; the hand-off's seconds."""
        t0 = time.monotonic()
        if on_engine:
            saved = await call(f"save policy version {version}",
                               _result(training.save_weights_for_sampler_async(name=f"v{version}")))
            path = getattr(saved, "path", None)
            if not path:
                raise EngineSamplingError(f"the Tinker server answered the save of version {version} with no path")
            if checkpoints is not None:
                archive = sampler_archive(checkpoints, path)
            else:
                (run_dir / "lora").mkdir(parents=True, exist_ok=True)
                archive = await download_archive(service, path, run_dir / "lora" / f"v{version}.tar.gz")
            await endpoint.load(version, archive)
        else:
            samplers[version] = await call(f"save weights for sampling (version {version})",
                                           training.save_weights_and_get_sampling_client_async())
            for old in [v for v in samplers if v < version - knobs.max_staleness_steps - 1]:
                del samplers[old]
        return time.monotonic() - t0

    def pin(version: int) -> None:
        if on_engine:
            endpoint.pin(version)
        else:
            endpoint.sampler = samplers[version]

    def refused() -> None:
        if getattr(endpoint, "refused", None):  # the rollouts asked for what the sampler cannot do
            raise ConfigError(constraint_error(endpoint.refused))

    async with endpoint:
        if on_engine:
            handoff = await publish(0)
            log(f"policy version 0 (the untrained LoRA) loaded into the engine in {handoff:.1f}s")
        pin(0)
        preflight = None
        if knobs.preflight_passes or preflight_only:
            checker = TackroomGenerator(config, base_url=endpoint.base_url, tokenizer=tokenizer, model=model_name,
                                        run_root=run_dir / "preflight", manager=manager)
            try:
                preflight = await error_rate_pass(
                    checker, rows, passes=knobs.preflight_passes or 1, max_error_rate=knobs.max_error_rate,
                    temperature=knobs.temperature, max_generate_length=knobs.max_generate_length, run_dir=run_dir,
                    log=log)
            finally:
                await checker.aclose()
            refused()
            if on_engine:
                await endpoint.check("the error-rate pass")
            if not preflight.passed:
                raise PreflightRefusedError(
                    f"{preflight.describe()}\nnot training: fix what fails (the trials are under {preflight.folder}) "
                    "or raise [train] max_error_rate knowingly")
            if preflight_only:
                return TinkerRunSummary(run_dir=str(run_dir), steps=0, first_reward=0.0, last_reward=0.0,
                                        best_reward=0.0, mismatch_mean=None, mismatch_warnings=0, curve_csv="",
                                        curve_png="", preflight=preflight, sampler=settings.sampler)
        generator = TackroomGenerator(config, base_url=endpoint.base_url, tokenizer=tokenizer, model=model_name,
                                      run_root=run_dir / "rollouts", manager=manager)

        async def rollout(index: int, version: int) -> tuple[list[Any], Any]:
            pin(version)
            prompts, extras, ids = [], [], []
            for row in next(batches):
                for k in range(knobs.samples_per_prompt):
                    prompts.append(row["prompt"])
                    extras.append({"task_id": row["task_id"], "task_path": row["task_path"]})
                    ids.append(TrajectoryID(instance_id=row["task_id"], repetition_id=k))
            out = await generator.generate({
                "prompts": prompts, "env_extras": extras, "trajectory_ids": ids,
                "sampling_params": {"temperature": knobs.temperature, "max_generate_length": knobs.max_generate_length},
                "batch_metadata": SimpleNamespace(global_step=index),
            })
            refused()
            if on_engine:  # failed requests were masked as infra: never train on them, stop
                await endpoint.check(f"batch {index} (policy version {version})")
            return ids, out

        async def train(sampled: Sampled, step: int, staleness: int) -> tuple[bool, dict[str, Any]]:
            ids, out = sampled.output
            groups = [tid.instance_id for tid in ids]
            masked = [not any(m) for m in out["loss_masks"]]
            advantages = grpo_advantages(out["rewards"], groups, masked, normalize=settings.normalize_advantages)
            batch = batch_from_output(out, advantages, groups, aggregation)
            # no trained row with a nonzero advantage (every group's rewards equal): no optimiser step
            trains = batch.has_signal
            record: dict[str, Any] = {
                "step": step, "mean_reward": mean(out["rewards"]),
                "trained_trials": batch.trained_rows if trains else 0, "masked_trials": sum(masked),
                "no_signal_trials": 0 if trains else batch.trained_rows,
                "mismatch_mean": None, "mismatch_max": None, "mismatch_flagged": False, "loss": None,
                "version": sampled.version, "staleness": staleness, "batch": sampled.index,
            }
            per_task: dict[str, list[float]] = defaultdict(list)
            for g, r in zip(groups, out["rewards"]):
                per_task[g].append(r)
            record.update({f"reward/{g}": mean(v) for g, v in per_task.items()})
            if trains:
                if loss_fn == "tackroom":
                    custom = TackroomLoss(spec, options, batch)
                    await call(f"step {step}: forward_backward (custom loss)", _result(
                        training.forward_backward_custom_async(datums(batch, with_advantages=False), custom)))
                    trainer_logprobs, record["loss"] = custom.trainer_logprobs, custom.last_loss
                    record.update(mismatch(batch, trainer_logprobs))
                else:
                    # only the rows a gradient flows through (the loss is the whole batch's: Batch.for_trainer)
                    sent = batch.subset(batch.for_trainer(micro_batch))
                    record["sent_rows"] = len(sent.rows)
                    old = ratios = None
                    if knobs.tis_ratio_type:  # the trainer's logprobs before the update: TIS's π_old
                        fwd = await call(f"step {step}: forward (TIS)", _result(
                            training.forward_async(datums(sent, with_advantages=False), "cross_entropy")))
                        old = [list(o["logprobs"].data) for o in fwd.loss_fn_outputs]
                        ratios, tis_metrics = tis_ratios(sent, old, knobs.tis_ratio_type,
                                                         token_cap=knobs.token_tis_ratio_clip_high,
                                                         sequence_cap=knobs.sequence_tis_ratio_clip_high)
                        record.update(tis_metrics)
                    data = datums(sent, with_advantages=True, old_logprobs=old, token_weights=ratios)
                    result = await call(f"step {step}: forward_backward",
                                        _result(training.forward_backward_async(data, loss_fn, loss_fn_config)))
                    trainer_logprobs = old or [list(o["logprobs"].data) for o in result.loss_fn_outputs]
                    record["loss"] = reduced_loss(data, result.loss_fn_outputs)
                    record.update(mismatch(sent, trainer_logprobs))
                await call(f"step {step}: optim_step",
                           _result(training.optim_step_async(types.AdamParams(learning_rate=lr))))
            elif batch.trained_rows:
                # no optimiser step, but the mismatch is still measured: a forward on a few trained rows
                probe = batch.subset(batch.for_mismatch(micro_batch))
                fwd = await call(f"step {step}: forward (mismatch)", _result(
                    training.forward_async(datums(probe, with_advantages=False), "cross_entropy")))
                record.update(mismatch(probe, [list(o["logprobs"].data) for o in fwd.loss_fn_outputs]))
                record["sent_rows"] = len(probe.rows)
            record["rollout_metrics"] = out["rollout_metrics"]
            return trains, record

        def write_trajectories(sampled: Sampled, step: int | None, staleness: int, trained: bool) -> None:
            ids, out = sampled.output
            with (run_dir / "trajectories.jsonl").open("a") as f:
                for tid, reward, m in zip(ids, out["rewards"], out["loss_masks"]):
                    f.write(json.dumps({"batch": sampled.index, "step": step, "version": sampled.version,
                                        "staleness": staleness, "task_id": tid.instance_id,
                                        "repetition": tid.repetition_id, "reward": reward, "masked": not any(m),
                                        "trained": trained and any(m), "dropped": step is None}) + "\n")

        def on_step(done: Trained, record: dict[str, Any]) -> None:
            metrics = record.pop("rollout_metrics")
            record.update({"rollout_s": done.sampled.rollout_s, "train_s": done.train_s, "handoff_s": done.handoff_s,
                           "dropped_batches": counts["dropped"]})
            records.append(record)
            write_trajectories(done.sampled, done.step, done.staleness, done.changed)
            line = (f"step {done.step}/{steps_total}: mean reward {record['mean_reward']:.3f} "
                    f"({record['trained_trials']} trained, {record['masked_trials']} masked; "
                    f"sampled with version {done.sampled.version}, staleness {done.staleness})")
            if record["no_signal_trials"]:
                line += ("\n  every group's rewards are equal: no learning signal, "
                         "no optimiser step (the weights stay as they are)")
            if record["mismatch_mean"] is not None:
                line += (f", |trainer-rollout| logprob {record['mismatch_mean']:.4f} (max {record['mismatch_max']:.3f}"
                         f"{'' if done.staleness == 0 else ', across %d version(s)' % done.staleness})")
                warning = mismatch_warning(record["mismatch_mean"], knobs.logprob_mismatch_warn)
                if warning is not None:
                    counts["warnings"] += 1
                    record["mismatch_flagged"] = True
                    line += f"\n  WARNING: {warning}"
            handoff = "" if done.handoff_s is None else f", {done.handoff_s:.1f}s hand-off"
            log(line + f"  [{record['rollout_s']:.0f}s rollout, {record['train_s']:.0f}s train{handoff}]")
            with (run_dir / "steps.jsonl").open("a") as f:
                f.write(json.dumps({**record, **{f"rollout/{k}": v for k, v in metrics.items()}}) + "\n")
            curve.write_csv(records, run_dir / "reward_curve.csv")

        def on_drop(done: Trained) -> None:
            counts["dropped"] += 1
            write_trajectories(done.sampled, None, done.staleness, False)
            log(f"batch {done.sampled.index} dropped: sampled with version {done.sampled.version}, "
                f"{done.staleness} versions old (> max_staleness_steps {knobs.max_staleness_steps})")

        try:
            await run_pipeline(steps=steps_total, max_staleness=knobs.max_staleness_steps, rollout=rollout,
                               train=train, publish=publish, on_step=on_step, on_drop=on_drop)
            saved = await call("save the final LoRA", _result(training.save_weights_for_sampler_async(name="final")))
            final_weights = getattr(saved, "path", None)
        finally:
            await generator.aclose()
    warnings = counts["warnings"]

    exported, policy_error = await _export(final_weights, run_dir, base_model, tokenizer, call, service, log)

    png = curve.write_png(records, run_dir / "reward_curve.png", title=f"{run_dir.name}: {loss_label}")
    log(curve.render_table(records))
    rewards = [r["mean_reward"] for r in records]
    mismatches = [r["mismatch_mean"] for r in records if r["mismatch_mean"] is not None]
    summary = TinkerRunSummary(
        run_dir=str(run_dir), steps=len(records), first_reward=rewards[0] if rewards else 0.0,
        last_reward=rewards[-1] if rewards else 0.0, best_reward=max(rewards, default=0.0),
        mismatch_mean=mean(mismatches) if mismatches else None, mismatch_warnings=warnings,
        mismatch_warn=config.train.logprob_mismatch_warn,
        curve_csv=str(run_dir / "reward_curve.csv"), curve_png=str(png), final_weights=final_weights,
        adapter=exported.adapter if exported else None, policy=exported.path if exported else None,
        served_name=run_dir.name if exported else None,
        serve_command=serve_command(exported.path, name=run_dir.name) if exported else None,
        policy_error=policy_error, preflight=preflight, reward_per_step=rewards,
        mismatch_per_step=[r["mismatch_mean"] for r in records], sampler=config.tinker.sampler,
        staleness_per_step=[r["staleness"] for r in records], dropped_batches=counts["dropped"],
        handoff_s_per_step=[r["handoff_s"] for r in records])
    (run_dir / "summary.json").write_text(summary.model_dump_json(indent=2))
    if exported is not None:
        latest = mark_latest(run_dir)
        if latest is not None:
            log(f"{latest} -> {run_dir.name}")
    return summary


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
