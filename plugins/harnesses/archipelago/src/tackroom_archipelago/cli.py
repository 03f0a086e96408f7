"""``tackroom archipelago ...``: the harness's commands (added through the ``tackroom_commands`` hook)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

archipelago_app = typer.Typer(help="The archipelago harness's tools: import Mercor tasks.", no_args_is_help=True)


@archipelago_app.command("import-mercor")
def import_mercor(
    src: Path = typer.Argument(..., help="A Mercor task folder (initial_messages.json, mcp_config.json, "
                               "verifiers.json, original_snapshot.zip) or a folder of them."),
    dest: Path = typer.Argument(..., help="Where the tackroom tasks go (one folder per task, plus run.toml)."),
    checkout: Path = typer.Option(None, "--checkout", help="The Mercor archipelago checkout holding mcp_servers/ "
                                  "(default: $TACKROOM_MERCOR_ARCHIPELAGO, else the nearest folder above SRC that has one)."),
    image: str = typer.Option("python:3.13-slim-bookworm", "--image", help="The tasks' docker_image (needs Python 3.13)."),
) -> None:
    """Turn Mercor task folders into tackroom world tasks (world files, servers, messages, rubric)."""
    from tackroom_archipelago.errors import MercorImportError
    from tackroom_archipelago.mercor_import import import_tasks

    try:
        imported = import_tasks(src, dest, checkout=checkout, image=image)
    except MercorImportError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    for task in imported:
        servers = ", ".join(f"{name} ({folder})" for name, folder in task.servers.items())
        typer.echo(f"{task.path}: {task.files} files, servers {servers}, {task.criteria} criteria")
    typer.echo(f"run them: tackroom run -c {dest / 'run.toml'} --base-url ... (a judge too: see the rubric-judge README)")


def add_archipelago_commands(app: Any) -> None:
    app.add_typer(archipelago_app, name="archipelago")
