"""``tackroom collect [CONFIG.toml] [flags]`` (added through the ``tackroom_commands`` hook): run a task set against
a teacher and keep the passing episodes as demonstrations (:mod:`tackroom_train.collect`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer


def add_collect_command(app: Any) -> None:
    @app.command("collect")
    def collect_command(
        config_file: Path = typer.Argument(None, help="A collect config TOML: a run config plus a collect table."),
        tasks: list[str] = typer.Option(None, "--tasks", help="Task or dataset directories (repeatable)."),
        harness: str = typer.Option(None, "--harness", help="Harness name (replaces the config's harnesses)."),
        sandbox: str = typer.Option(None, "--sandbox", help="Sandbox name (default: local)."),
        verifier: str = typer.Option(None, "--verifier", help="Verifier name (default: test-script)."),
        base_url: str = typer.Option(None, "--base-url", help="The teacher: an OpenAI-compatible endpoint (/v1)."),
        model: str = typer.Option(None, "--model", help="The teacher's model name at that endpoint."),
        teacher_tokenizer: str = typer.Option(None, "--teacher-tokenizer", help="The teacher's tokenizer, which "
                                              "the policy gateway renders with (policy.tokenizer)."),
        teacher_script: str = typer.Option(None, "--teacher-script", help="Serve a scripted teacher for the run: "
                                           "module:function or path/to/file.py:function, reply(prompt) -> text."),
        tokenizer: str = typer.Option(None, "--tokenizer", help="The policy's tokenizer: smollm2, qwen3 or a "
                                      "local folder; the dataset's ids are in it."),
        out: str = typer.Option(None, "--out", help="The dataset: a .jsonl or .parquet file in a folder that "
                                "exists (default: demonstrations.jsonl)."),
        min_reward: float = typer.Option(None, "--min-reward", help="Keep trials with at least this reward "
                                         "(default 1.0)."),
        passes: int = typer.Option(None, "--passes", help="Trials per task and harness (default 1)."),
        runs: str = typer.Option(None, "--runs", help="Runs directory for the trial folders (default: runs)."),
        run_id: str = typer.Option(None, "--run-id", help="Name the run folder (a fresh one beside it when taken)."),
        concurrency: int = typer.Option(None, "--concurrency", help="Trials at once."),
        include: list[str] = typer.Option(None, "--include", help="Only task ids matching these patterns."),
        exclude: list[str] = typer.Option(None, "--exclude", help="Skip task ids matching these patterns."),
        as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON instead of tables."),
    ) -> None:
        """Collect demonstrations: run tasks against a teacher, keep the episodes that pass, in the policy's tokens."""
        from tackroom import TackroomError
        from tackroom_app import command_console, print_error, run_to_completion
        from tackroom_train.collect.config import CollectConfig, apply_flags, load_collect_config
        from tackroom_train.collect.run import collect
        from tackroom_train.collect.summary import summary_tables

        console, err = command_console(), command_console(stderr=True)
        flags = {"harness": harness, "sandbox": sandbox, "verifier": verifier, "base_url": base_url, "model": model,
                 "teacher_tokenizer": teacher_tokenizer, "teacher_script": teacher_script, "tokenizer": tokenizer,
                 "out": out, "min_reward": min_reward, "passes": passes, "runs": runs, "run_id": run_id,
                 "concurrency": concurrency, "include": include, "exclude": exclude,
                 "tasks": [str(Path(t).resolve()) for t in tasks or []]}
        try:
            config = load_collect_config(config_file) if config_file else CollectConfig()
            config = apply_flags(config, flag_overrides(config, flags), source=str(config_file or "collect config"))
            summary = run_to_completion(collect(config, progress=not as_json))
        except TackroomError as exc:
            print_error(exc, err)
            raise typer.Exit(2) from None
        if as_json:
            typer.echo(json.dumps(summary.model_dump(mode="json"), indent=2))
        else:
            for table in summary_tables(summary):
                console.print(table)
            if summary.dataset:
                console.print(f"{summary.total.demonstrations} demonstrations ({summary.total.trained_tokens} "
                              f"trained tokens) → {summary.dataset}; summary → {summary.summary}")
        problem = summary.problem()
        if problem:
            print_error(problem, err)
            raise typer.Exit(1)


_PATHS = {"base_url": "policy.base_url", "model": "policy.model", "teacher_tokenizer": "policy.tokenizer",
          "teacher_script": "collect.teacher_script", "tokenizer": "collect.tokenizer", "out": "collect.out",
          "min_reward": "collect.min_reward", "passes": "collect.passes", "runs": "runtime.out",
          "run_id": "runtime.run_id", "concurrency": "runtime.concurrency", "include": "include",
          "exclude": "exclude", "tasks": "tasks"}
"""Each flag's dotted path in the config (the plugin flags are handled apart)."""


def flag_overrides(config: Any, flags: dict[str, Any]) -> dict[str, Any]:
    """The dotted-path overrides the given flags make; a flag left out (None, empty) keeps the config's value."""
    from tackroom_app import PluginSelection

    overrides: dict[str, Any] = {}
    for name in ("harness", "sandbox", "verifier"):
        value = flags.get(name)
        if value and value != getattr(config, name).name:  # the same name keeps the config's options for it
            overrides[name] = PluginSelection(name=value).model_dump()
        if name == "harness" and value:
            overrides["collect.harnesses"] = []
    for name, path in _PATHS.items():
        value = flags.get(name)
        if value is not None and value != []:
            overrides[path] = value
    return overrides
