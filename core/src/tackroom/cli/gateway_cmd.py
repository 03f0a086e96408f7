"""``tackroom gateway``: run the policy gateway standalone in front of an engine."""

from __future__ import annotations

import asyncio
import signal

import typer

from tackroom.cli.app import app, console


@app.command("gateway")
def gateway(
    engine: str = typer.Option(..., "--engine", help="The engine's OpenAI base URL, e.g. http://127.0.0.1:8011/v1."),
    tokenizer: str = typer.Option(
        "smollm2", "--tokenizer", help="Tokenizer folder with a chat template, or smollm2 / qwen3."
    ),
    port: int = typer.Option(8100, "--port", help="Port to listen on (0 picks a free one)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; loopback unless you mean otherwise."),
    model: str | None = typer.Option(None, "--model", help="Served model name (default: the engine's first)."),
    tool_parser: str = typer.Option("auto", "--tool-parser", help="hermes, qwen3 or auto."),
) -> None:
    """Serve OpenAI chat completions at http://HOST:PORT/sessions/{session}/v1, token-in-token-out."""
    from tackroom.gateway import build_gateway

    gw = build_gateway(engine, tokenizer=tokenizer, model=model, tool_parser=tool_parser, host=host, port=port)

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await gw.start()
        console.print(
            f"policy gateway for [bold]{gw.model_name}[/] at {engine}\n"
            f"  session base URL: {gw.base_url}/sessions/<session_id>/v1\n"
            f"  trajectory:       {gw.base_url}/sessions/<session_id>/trajectory\n"
            "  Ctrl-C (or SIGTERM) stops it",
            highlight=False,
        )
        await gw.serve_until(stop)
        console.print("gateway stopped", highlight=False)

    try:
        import uvloop  # a faster event loop where available: the gateway sits on every model call
    except ImportError:
        uvloop = None
    uvloop.run(serve()) if uvloop is not None else asyncio.run(serve())
