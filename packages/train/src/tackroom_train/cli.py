"""``tackroom train CONFIG.toml`` (added through the ``tackroom_commands`` hook): a dispatcher.

It reads the config, claims the run folder, resolves the plan once (:func:`~tackroom_train.plan.resolve_plan`),
writes the prompt dataset and hands the rest to the plan's backend (:mod:`tackroom_train.backends`): what to
print, and the run in the mode the config and the flags ask for.
"""

from __future__ import annotations

import json
import tempfile
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
        rollouts: str = typer.Option(None, "--rollouts", help="A `tackroom serve` URL: its trials run there, not "
                                     "here ([rollout] service; token from $TACKROOM_SERVE_TOKEN)."),
    ) -> None:
        """Train with SkyRL's fully-async trainer, any harness as the rollout engine."""

        from tackroom import TackroomError
        from tackroom_app import command_console, print_error
        from tackroom_train.backends import Output

        out = Output(command_console(), command_console(stderr=True))
        try:
            code = run_train(config_file, out, backend=backend, run_id=run_id, dry_run=dry_run, as_json=as_json,
                             preflight_only=preflight_only, rollouts=rollouts)
        except TackroomError as exc:
            print_error(exc, out.err)
            raise typer.Exit(2) from None
        if code:
            raise typer.Exit(code)


def run_train(config_file: Path, out: Any, *, backend: str | None = None, run_id: str | None = None,
              dry_run: bool = False, as_json: bool = False, preflight_only: bool = False,
              rollouts: str | None = None) -> int:
    """``tackroom train``: the plan, what the backend prints for it, then (unless ``dry_run``) the run; the exit
    status. ``rollouts``: a ``tackroom serve`` URL that runs the trials (``[rollout] service``). A
    :class:`~tackroom.TackroomError` (a config the plugins or the backend refuse) propagates."""
    from tackroom import ConfigError
    from tackroom_app import claim_run_dir
    from tackroom_train.backends import BACKENDS
    from tackroom_train.config import load_train_config

    config = load_train_config(config_file)
    if backend:
        if backend not in BACKENDS:
            raise ConfigError(f"--backend {backend!r}: one of {', '.join(BACKENDS)}")
        config.backend = backend  # type: ignore[assignment]
    if rollouts:
        config.rollout.service = rollouts
    if dry_run:  # maps everything as the run would, in a folder that is gone after: a dry run leaves no run folder
        # behind, and never rewrites the prompts of a named run it shares an id with
        with tempfile.TemporaryDirectory(prefix="tackroom-dry-run-") as scratch:
            return _plan_and_run(config, config_file, out, claim_run_dir(scratch, run_id), dry_run=True,
                                 as_json=as_json, preflight_only=preflight_only)
    # a plain --run-id (no path, no ..); a generated one has a random suffix, so two trains started
    # in the same second never share a folder
    return _plan_and_run(config, config_file, out, claim_run_dir(config.rollout.out, run_id), dry_run=False,
                         as_json=as_json, preflight_only=preflight_only)


def _plan_and_run(config: Any, config_file: Path, out: Any, run_dir: Path, *, dry_run: bool, as_json: bool,
                  preflight_only: bool) -> int:
    from tackroom.services import redact
    from tackroom_train.backends import mode_of, open_backend
    from tackroom_train.dataset import write_prompt_dataset
    from tackroom_train.plan import resolve_plan

    plan = resolve_plan(config)
    dataset = write_prompt_dataset(plan.rows, run_dir / "prompts.jsonl")
    trainer = open_backend(plan, run_dir, dataset)
    if as_json:
        typer.echo(json.dumps(redact(trainer.view.model_dump(mode="json")), indent=2))
    else:
        where = "(a dry run: nothing is kept)" if dry_run else f"→ {dataset}"
        out.console.print(f"[bold]tackroom train[/] {config_file}: {plan.describe_rows()} {where}")
        for line in trainer.describe():
            out.console.print(line)
        if plan.rollout.rollout.service:
            out.console.print(f"  rollouts: the tackroom serve at {plan.rollout.rollout.service} runs the trials "
                              f"(token from ${plan.rollout.rollout.service_token_env})")
        if dry_run:
            for line in trainer.dry_run(config):
                out.say(line)
    if dry_run:
        return 0
    return trainer.run(config, mode_of(config, preflight_only=preflight_only), out)
