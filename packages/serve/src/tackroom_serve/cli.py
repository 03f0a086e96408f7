"""``tackroom serve`` (added through the ``tackroom_commands`` hook) and ``python -m tackroom_serve``."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import typer

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (default: this machine only)."),
    port: int = typer.Option(8300, "--port", help="Port to listen on (0: any free port)."),
    folder: Path = typer.Option(Path("serve"), "--folder", help="The service's folder: its SQLite database (by "
                                "default) and each batch's trial folders."),
    db: str = typer.Option(None, "--db", help="Database URL, e.g. postgresql://user@host/db (default: "
                           "sqlite in --folder)."),
    tokens: Path = typer.Option(None, "--tokens", help="A file of `NAME TOKEN` lines, one per client (default: one "
                                "token, generated and printed)."),
    concurrency: int = typer.Option(16, "--concurrency", min=1, help="Trials at once over every batch."),
    on_restart: str = typer.Option("requeue", "--on-restart", help="Rollouts the last process left running: "
                                   "requeue (a new attempt) or interrupt."),
    max_body_mb: float = typer.Option(1.0, "--max-body-mb", help="Largest request body taken (MB)."),
    tasks_root: Path = typer.Option(Path("."), "--tasks-root", help="Relative task paths of a batch resolve here."),
) -> None:
    """Serve rollouts over HTTP: batches of tasks × samples through a harness, sandbox and verifier, kept in a
    database; Ctrl-C stops (what runs is resumed at the next start)."""
    import uvicorn

    from tackroom import ConfigError
    from tackroom_serve.app.auth import Tokens
    from tackroom_serve.app.server import ServeSettings, Service

    if on_restart not in ("requeue", "interrupt"):
        raise ConfigError(f"--on-restart {on_restart!r}: requeue or interrupt")
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port {port}: a port is 0…65535")
    if tokens is not None:
        known, printed = Tokens.from_file(tokens), None
    else:
        known, printed = Tokens.generated()
    settings = ServeSettings(folder=folder, db=db, concurrency=concurrency,
                             on_restart=on_restart,  # type: ignore[arg-type]
                             max_body_bytes=int(max_body_mb * (1 << 20)), tasks_root=tasks_root)
    service = Service(settings, known)
    sock = _listen(host, port)
    shown = f"[{host}]" if ":" in host else host
    if host not in LOCAL_HOSTS:
        typer.echo(f"warning: listening on {host}: anyone who reaches it and holds a token can run tasks here",
                   err=True)
    typer.echo(f"tackroom serve: http://{shown}:{sock.getsockname()[1]}/  (database "
               f"{service.url.render_as_string(hide_password=True)}; Ctrl-C stops)")
    if printed is not None:
        typer.echo(f"token (client 'default'): {printed}")
    sys.stdout.flush()
    config = uvicorn.Config(service.app, log_level="warning", timeout_graceful_shutdown=5, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


def _listen(host: str, port: int) -> socket.socket:
    from tackroom import ConfigError

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)  # connections wait in the backlog from the moment the address is printed
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port} ({exc.strerror}): pick another --port") from None
    return sock


def add_commands(app: typer.Typer) -> None:
    app.command("serve")(serve)
