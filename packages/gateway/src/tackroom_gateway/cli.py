"""``tackroom gateway``: run the policy gateway standalone in front of an engine.

Added to the ``tackroom`` CLI through the ``tackroom_commands`` hook (see ``tackroom_gateway.__init__``);
``python -m tackroom_gateway`` runs the same command without loading any plugin.

It prints its admin token (random per start). An outside client gets a session with
``POST /sessions`` and ``Authorization: Bearer <admin token>`` (body: nothing, or
``{"session_id": "..."}``); the answer's ``base_url`` (``.../sessions/<id>/<token>/v1``)
is an ordinary OpenAI base URL, the only thing an agent should be given. ``--workers N`` serves the same address
from N processes, each session in one of them (:mod:`tackroom_gateway.workers`).
"""

from __future__ import annotations

import asyncio
import signal
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

if TYPE_CHECKING:
    from tackroom_gateway.server import PolicyGateway
    from tackroom_gateway.workers import GatewayWorkers

console = Console()


def gateway(
    engine: str = typer.Option(..., "--engine", help="The engine's OpenAI base URL, e.g. http://127.0.0.1:8011/v1."),
    tokenizer: str = typer.Option(
        "smollm2", "--tokenizer", help="Tokenizer folder with a chat template, or smollm2 / qwen3."
    ),
    port: int = typer.Option(8100, "--port", help="Port to listen on (0 picks a free one)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; loopback unless you mean otherwise."),
    model: str | None = typer.Option(None, "--model", help="Served model name (default: the engine's first)."),
    tool_parser: str = typer.Option("auto", "--tool-parser", help="hermes, qwen3 or auto."),
    workers: int = typer.Option(
        1, "--workers", min=1,
        help="Worker processes behind the one address, each session pinned to one (1: a single process)."),
) -> None:
    """Serve OpenAI chat completions at http://HOST:PORT/sessions/{id}/{token}/v1, token-in-token-out.

    Sessions are created with POST /sessions and the admin token it prints; each
    session's base URL carries its own secret token.
    """
    from tackroom_gateway.asgi_server import run_event_loop

    if workers > 1:
        from tackroom_gateway.backend import GatewaySettings
        from tackroom_gateway.workers import GatewayWorkers, WorkersSettings

        settings = GatewaySettings.for_engine(engine, tokenizer=tokenizer, model=model, tool_parser=tool_parser,
                                              host=host, port=port)
        run_event_loop(_serve(GatewayWorkers(settings, WorkersSettings(workers=workers)), engine))
    else:
        from tackroom_gateway.server import build_gateway

        run_event_loop(_serve(build_gateway(engine, tokenizer=tokenizer, model=model, tool_parser=tool_parser,
                                            host=host, port=port), engine))


async def _serve(gw: PolicyGateway | GatewayWorkers, engine: str) -> None:
    """Start ``gw`` (one process, or a front and its workers), print how to use it, serve until SIGINT/SIGTERM."""
    from tackroom_gateway.server import PolicyGateway

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await gw.start()
    url = gw.base_url
    workers = "" if isinstance(gw, PolicyGateway) else (
        f"  workers:          {len(gw.pids)} processes (pids {', '.join(map(str, gw.pids))}), each session pinned "
        "to one by its id\n")
    console.print(
        f"policy gateway for [bold]{gw.model_name}[/] at {engine}\n"
        f"{workers}"
        f"  admin token:      {gw.admin_token}\n"
        "                    (Authorization: Bearer; lists, reads and deletes sessions: never give it to an agent)\n"
        f"  new session:      curl -s -X POST -H 'Authorization: Bearer {gw.admin_token}' {url}/sessions\n"
        '                    answers {"session_id", "base_url", "trajectory_url"}\n'
        f"  session base URL: {url}/sessions/<session_id>/<session_token>/v1 (the base_url above)\n"
        f"  trajectory:       {url}/sessions/<session_id>/<session_token>/trajectory\n"
        "  Ctrl-C (or SIGTERM) stops it",
        highlight=False, soft_wrap=True,
    )
    await gw.serve_until(stop)
    console.print("gateway stopped", highlight=False)


def add_gateway_command(app: Any) -> None:
    app.command("gateway")(gateway)
