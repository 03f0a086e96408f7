"""The ``tinker`` backend (:class:`~tackroom_train.backends.Backend`): SkyRL's Tinker API server (JAX, on CPU).

Every mode runs here: ``train`` (:func:`~.loop.train_on_tinker`, with the console's progress bar), ``preflight``
(the error-rate pass alone), ``eval`` (train, then serve and evaluate the policy: :mod:`tackroom_train.sweep`) and
``arms`` (every ``[[arms]]`` arm, then their table).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tackroom_train.backends import Mode, Output
from tackroom_train.config import TrainConfig
from tackroom_train.plan import TrainPlan
from tackroom_train.tinker.step_trainer import LossChoice


class TinkerView(BaseModel):
    """What the tinker backend is about to do (``--json`` prints it)."""

    run_dir: str
    dataset: str
    tasks: int
    loss: str
    """The loss, its aggregation and how it reaches the server, in words."""
    loss_fn: str
    loss_fn_config: dict[str, float] | None = None
    server: str
    """``[tinker] url``, or that the run starts SkyRL's server."""
    lora_rank: int
    sampler: str
    sft: str | None = None
    """The ``[sft]`` warm start, in words (None: none)."""
    init_from: str | None = None
    """The policy folder the run's weights start from (``[model] init_from``)."""


def sft_line(report: Any, run_dir: Path) -> str:
    """The warm start's outcome in one line: the loss from first to last step, the held-out NLL before → after."""
    losses = report.loss_per_step
    line = (f"sft: {report.steps} steps, loss {losses[0]:.4f} → {losses[-1]:.4f}" if losses else "sft: no step")
    if report.epoch_nll:
        line += f", mean NLL per epoch {' → '.join(f'{x:.4f}' for x in report.epoch_nll)}"
    if report.eval_nll_before is not None and report.eval_nll_after is not None:
        line += f"; held-out NLL {report.eval_nll_before:.4f} → {report.eval_nll_after:.4f} per token"
    return line + f" ({run_dir / 'sft_steps.jsonl'})"


class TinkerBackend:
    """The ``tinker`` backend: see the module docstring."""

    name = "tinker"

    def __init__(self, plan: TrainPlan, run_dir: Path, dataset: Path) -> None:
        self.plan = plan
        self.run_dir = run_dir
        self.loss = LossChoice.choose(plan.loss, plan.tinker.loss_fn)
        self.view = TinkerView(run_dir=str(run_dir), dataset=str(dataset), tasks=len(plan.rows),
                               loss=self.loss.describe(), loss_fn=self.loss.loss_fn,
                               loss_fn_config=self.loss.loss_fn_config,
                               server=plan.tinker.url or "starts SkyRL Tinker API server (JAX)",
                               lora_rank=plan.tinker.lora_rank, sampler=plan.tinker.sampler,
                               sft=plan.sft.describe() if plan.sft else None,
                               init_from=str(plan.start_from) if plan.start_from else None)

    def describe(self) -> list[str]:
        lines = [f"  backend tinker: {self.view.server}, LoRA rank {self.view.lora_rank}, "
                 f"loss_fn {self.plan.tinker.loss_fn}"]
        if self.view.init_from:
            lines.append(f"  starting from {self.view.init_from} ([model] init_from)")
        if self.view.sft:
            lines.append(f"  {self.view.sft}")
        return lines

    def dry_run(self, config: TrainConfig) -> list[str]:
        """The loss as it reaches the server, each arm's overrides (checked against the plugins) and the eval plan."""
        lines = [f"  loss: {self.view.loss}"] if self.plan.rl else []
        if config.arms:
            from tackroom_train.arms import arm_configs, describe_arm

            for arm, arm_config in arm_configs(config):
                what = describe_arm(arm, arm_config)
                extra = f", harness {what['harness']}" if what["harness"] else ""
                lines.append(f"  arm {arm.label}: loss {what['loss']}, {what['aggregation']}, nudge {what['nudge']}"
                             f"{extra}, seed {arm_config.train.seed}")
        if config.eval is not None:
            from tackroom_train.evaluation import check_eval

            check_eval(config)
            from tackroom_train.evaluation import eval_harnesses

            rows = [h.get("label") or h["name"] for h in eval_harnesses(config)]
            lines.append(f"  eval: {config.eval.passes} passes under {', '.join(rows)} on port {config.eval.port}"
                         + (", base model too" if config.eval.baseline else ""))
        return lines

    def run(self, config: TrainConfig, mode: Mode, out: Output) -> int:
        if mode == "arms":
            return self._arms(config, out)
        return self._train(config, mode, out)

    def _arms(self, config: TrainConfig, out: Output) -> int:
        """Every arm in order, then their table; 1 when an arm (or the base model's evaluation) failed."""
        from tackroom_app import run_to_completion
        from tackroom_train.sweep import run_arms

        run_dir = self.run_dir
        report = run_to_completion(run_arms(config, run_dir, log=out.say))
        out.console.print(report.rich_table())
        out.console.print(f"arms table: {run_dir / 'arms.json'}, {run_dir / 'arms.md'}", highlight=False)
        failed = [a.label for a in report.arms if a.status != "ok"] + (["base"] if report.baseline_error else [])
        if not failed:
            return 0
        out.err.print(f"[red]error:[/] arms failed: {', '.join(failed)} (see {run_dir / 'arms.json'}); "
                      f"re-run with --run-id {run_dir.name} to retry them (finished arms are reused)",
                      highlight=False)
        return 1

    def _train(self, config: TrainConfig, mode: Mode, out: Output) -> int:
        """One training run (``train``, ``eval``) or its error-rate pass alone (``preflight``), then its summary."""
        from rich.progress import Progress

        from tackroom_app import run_to_completion
        from tackroom_train.tracking import ProgressTracker, check_trackers, progress_columns

        check_trackers(self.plan.train.trackers)  # before anything starts: a missing package costs seconds
        single = mode == "train"  # the bar follows a single training run
        with Progress(*progress_columns(), console=out.console, disable=not single) as bar:
            def log(s: str) -> None:
                bar.console.print(s, markup=False, highlight=False)

            progress = ProgressTracker(bar) if single else None
            summary = run_to_completion(self._steps(config, mode, log, progress))
        if mode == "preflight":
            return 0
        return self._report(summary, config, out)

    async def _steps(self, config: TrainConfig, mode: Mode, log: Any, progress: Any) -> Any:
        from tackroom_train.tinker.loop import RunScope, train_on_tinker

        def scope(run_dir: Path, log: Any) -> RunScope:
            return RunScope(run_dir, log=log, preflight_only=mode == "preflight", progress=progress)

        if mode != "eval":
            return await train_on_tinker(self.plan, scope(self.run_dir, log))
        from tackroom_train.evaluation import check_eval
        from tackroom_train.sweep import Steps, train_and_evaluate

        check_eval(config)  # before training: a typo in [eval] costs seconds, not the run
        steps = Steps(train=lambda _config, run_dir, log: train_on_tinker(self.plan, scope(run_dir, log)))
        return await train_and_evaluate(config, self.run_dir, steps=steps, log=log)

    def _report(self, summary: Any, config: TrainConfig, out: Output) -> int:
        """The warm start, the run's curve, its policy and how to serve it, and the eval table; 1 when no policy
        was written."""
        if summary.sft is not None:
            out.say(sft_line(summary.sft, self.run_dir))
        if summary.steps:
            out.say(f"reward {summary.first_reward:.3f} → {summary.last_reward:.3f} (best {summary.best_reward:.3f}); "
                    f"curve: {summary.curve_csv}, {summary.curve_png}; LoRA: {summary.final_weights}")
            if summary.reward_per_harness_per_step:
                out.say(harness_line(summary.reward_per_harness_per_step))
        if summary.policy is None:
            from tackroom_app import print_error

            print_error(f"no servable policy was written: {summary.policy_error}", out.err)
            return 1
        out.console.print(f"trained policy: {summary.policy}; serve it beside the base model with", highlight=False)
        out.say(f"  {summary.serve_command}", soft_wrap=True)  # copy-paste whole
        if summary.sft is not None and not summary.steps:
            out.say(f"start RL from it: [model] init_from = \"{self.run_dir}\"")
        if summary.eval is not None and config.eval is not None:
            from tackroom_train.sweep import ArmsReport

            view = ArmsReport(run_dir=str(self.run_dir), seed=self.plan.train.seed, passes=config.eval.passes,
                              arms=[], baseline=summary.eval)
            out.console.print(view.rich_table())
            out.console.print(f"eval table in {self.run_dir / 'summary.json'}", highlight=False)
        return 0


def harness_line(per_step: dict[str, list[float | None]]) -> str:
    """Each harness's reward from its first step with rows to its last: ``per harness: answer 0.250 → 0.750, …``."""
    parts = []
    for label, rewards in per_step.items():
        seen = [r for r in rewards if r is not None]
        parts.append(f"{label} {seen[0]:.3f} → {seen[-1]:.3f}" if seen else f"{label} -")
    return "reward per harness (first → last step it ran in): " + ", ".join(parts)
