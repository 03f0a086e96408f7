"""``tackroom train CONFIG.toml`` (added through the ``tackroom_commands`` hook)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer


def add_train_command(app: Any) -> None:
    @app.command("train")
    def train(
        config_file: Path = typer.Argument(..., help="A train config TOML (see examples/train/)."),
        backend: str = typer.Option(None, "--backend", help="skyrl (GPU cluster) or tinker; default: the config's."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Map the config and print it with the ceilings; train nothing."),
        run_id: str = typer.Option(None, "--run-id", help="Run directory name (default: a timestamp)."),
        as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
        preflight_only: bool = typer.Option(False, "--preflight", help="Run only the error-rate pass over the "
                                            "training tasks (tinker backend) and report it; train nothing."),
    ) -> None:
        """Train with SkyRL's fully-async trainer, any harness as the rollout engine."""
        from rich.console import Console

        from tackroom import TackroomError
        from tackroom_skyrl.config import load_train_config
        from tackroom_skyrl.launch import launch, plan
        from tackroom_skyrl.preflight import check_machine

        console, err = Console(), Console(stderr=True)
        try:
            config = load_train_config(config_file)
            if backend:
                config.backend = backend  # type: ignore[assignment]
            from tackroom.app import claim_run_dir

            # a plain --run-id (no path, no ..); a generated one has a random suffix, so two trains started
            # in the same second never share a folder
            run_dir = claim_run_dir(config.rollout.out, run_id)
            train_plan = plan(config, run_dir)
            if as_json:
                from tackroom import redact

                typer.echo(json.dumps(redact(train_plan.model_dump(mode="json")), indent=2))
            else:
                console.print(f"[bold]tackroom train[/] {config_file}: {train_plan.tasks} tasks → {train_plan.dataset}")
                if config.backend == "tinker":
                    console.print(f"  backend tinker: {config.tinker.url or 'starts SkyRL Tinker API server (JAX)'}, "
                                  f"LoRA rank {config.tinker.lora_rank}, loss_fn {config.tinker.loss_fn}")
                else:
                    for line in train_plan.ceilings.lines():
                        console.print("  " + line)
                if dry_run and config.backend == "tinker":
                    from tackroom_skyrl.tinker.loop import describe_loss

                    console.print("  loss: " + describe_loss(config), markup=False)
                    _print_arms(config, console)
                elif dry_run:
                    console.print("SkyRL overrides:")
                    from tackroom import redact

                    for key, value in redact(train_plan.overrides).items():
                        console.print(f"  {key} = {json.dumps(value)}")
            if dry_run:
                return
            if preflight_only and config.backend != "tinker":
                from tackroom import ConfigError

                raise ConfigError("--preflight runs on the tinker backend; on the SkyRL backend run the error-rate "
                                  "pass as a matrix over the training tasks (tackroom matrix --passes N)")
            if (config.arms or config.eval is not None) and config.backend != "tinker" and not preflight_only:
                from tackroom import ConfigError

                raise ConfigError("[[arms]] and [eval] run on the tinker backend (backend = \"tinker\"); on the SkyRL "
                                  "GPU backend train each arm as its own config and evaluate with tackroom matrix")
            if config.backend == "tinker" and config.arms and not preflight_only:
                from tackroom.app import run_to_completion
                from tackroom_skyrl.sweep import run_arms

                report = run_to_completion(run_arms(config, run_dir,
                                              log=lambda s: console.print(s, markup=False, highlight=False)))
                console.print(report.rich_table())
                console.print(f"arms table: {run_dir / 'arms.json'}, {run_dir / 'arms.md'}", highlight=False)
                failed = [a.label for a in report.arms if a.status != "ok"] + (["base"] if report.baseline_error else [])
                if failed:
                    err.print(f"[red]error:[/] arms failed: {', '.join(failed)} (see {run_dir / 'arms.json'}); "
                              f"re-run with --run-id {run_dir.name} to retry them (finished arms are reused)",
                              highlight=False)
                    raise typer.Exit(1)
                return
            if config.backend == "tinker":
                from rich.progress import Progress

                from tackroom.app import run_to_completion
                from tackroom_skyrl.tinker.loop import run_tinker
                from tackroom_skyrl.tracking import ProgressTracker, check_trackers, progress_columns

                check_trackers(config.train.trackers)  # before anything starts: a missing package costs seconds
                single = config.eval is None and not preflight_only  # the bar follows a single training run
                with Progress(*progress_columns(), console=console, disable=not single) as bar:
                    def log(s: str) -> None:
                        bar.console.print(s, markup=False, highlight=False)

                    progress = ProgressTracker(bar) if single else None
                    if config.eval is not None and not preflight_only:
                        from tackroom_skyrl.evaluation import check_eval
                        from tackroom_skyrl.sweep import train_and_evaluate

                        check_eval(config)  # before training: a typo in [eval] costs seconds, not the run
                        summary = run_to_completion(train_and_evaluate(config, run_dir, log=log))
                    else:
                        summary = run_to_completion(run_tinker(config, run_dir, preflight_only=preflight_only, log=log,
                                                               progress=progress))
                if preflight_only:
                    return
                console.print(f"reward {summary.first_reward:.3f} → {summary.last_reward:.3f} (best {summary.best_reward:.3f}); "
                              f"curve: {summary.curve_csv}, {summary.curve_png}; LoRA: {summary.final_weights}",
                              markup=False, highlight=False)
                if summary.policy is None:
                    from tackroom.app import print_error

                    print_error(f"no servable policy was written: {summary.policy_error}", err)
                    raise typer.Exit(1)
                console.print(f"trained policy: {summary.policy}; serve it beside the base model with", highlight=False)
                console.print(f"  {summary.serve_command}", markup=False, highlight=False, soft_wrap=True)  # copy-paste whole
                if summary.eval is not None:
                    from tackroom_skyrl.sweep import ArmsReport

                    view = ArmsReport(run_dir=str(run_dir), seed=config.train.seed, passes=config.eval.passes, arms=[],
                                      baseline=summary.eval)
                    console.print(view.rich_table())
                    console.print(f"eval table in {run_dir / 'summary.json'}", highlight=False)
                return
            check_machine(config)
            launch(config, train_plan)
        except TackroomError as exc:
            from tackroom.app import print_error

            print_error(exc, err)
            raise typer.Exit(2) from None


def _print_arms(config: Any, console: Any) -> None:
    """``--dry-run``: each arm's overrides (checked against the plugins) and the eval plan."""
    if config.arms:
        from tackroom_skyrl.arms import arm_configs, describe_arm

        for arm, arm_config in arm_configs(config):
            what = describe_arm(arm, arm_config)
            extra = f", harness {what['harness']}" if what["harness"] else ""
            console.print(f"  arm {arm.label}: loss {what['loss']}, {what['aggregation']}, nudge {what['nudge']}{extra}, "
                          f"seed {arm_config.train.seed}", markup=False, highlight=False)
    if config.eval is not None:
        from tackroom_skyrl.evaluation import check_eval

        check_eval(config)
        rows = [h.label or h.name for h in config.eval.harnesses] or [config.harness.name]
        console.print(f"  eval: {config.eval.passes} passes under {', '.join(rows)} on port {config.eval.port}"
                      + (", base model too" if config.eval.baseline else ""), markup=False, highlight=False)
