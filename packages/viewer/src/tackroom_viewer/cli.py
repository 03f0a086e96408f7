"""``tackroom view [RUN_DIR]``, ``tackroom export atif RUN_DIR OUT`` and ``tackroom import atif IN OUT``
(added through the ``tackroom_commands`` hook)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def view(
    run_dir: Path = typer.Argument(Path("runs"), help="A run folder, or a folder of runs (default: runs)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (default: this machine only)."),
    port: int = typer.Option(8765, "--port", help="Port to listen on (0: any free port)."),
) -> None:
    """Serve a local web viewer of runs and trials: turns, tool calls, tokens, grading, curves; Ctrl-C stops it."""
    import socket

    import uvicorn

    from tackroom import ConfigError
    from tackroom_viewer.app import create_app

    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such folder (pass a run folder, or the folder runs are written to, "
                          "e.g. `tackroom view runs`)")
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port {port}: a port is 0…65535")
    hosts = sorted({*LOCAL_HOSTS, "[::1]", host})
    if host not in LOCAL_HOSTS:
        typer.echo(f"warning: listening on {host}: anyone who reaches it can read these trajectories", err=True)
        hosts = ["*"]
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)  # connections wait in the backlog from the moment the address is printed
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port} ({exc.strerror}): pick another --port") from None
    shown = f"[{host}]" if ":" in host else host
    typer.echo(f"tackroom view: http://{shown}:{sock.getsockname()[1]}/  ({run_dir.resolve()}; Ctrl-C stops)")
    server = uvicorn.Server(uvicorn.Config(create_app(run_dir, allowed_hosts=hosts), log_level="warning"))
    server.run(sockets=[sock])


def export_atif(
    run_dir: Path = typer.Argument(..., help="A run folder (or a folder of runs, or one trial folder)."),
    out: Path = typer.Argument(..., help="Folder to write one ATIF JSON file per trial into."),
) -> None:
    """Write each trial's trajectory as Harbor's ATIF (v1.8): steps, tool calls, observations, token ids, logprobs."""
    from tackroom import ConfigError
    from tackroom_viewer.atif_files import export_run

    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such folder")
    written, skipped = export_run(run_dir, out)
    for path, why in skipped:
        typer.echo(f"skipped {path}: {why}", err=True)
    typer.echo(f"wrote {len(written)} ATIF trajectories to {out}")
    if not written:
        raise typer.Exit(1)


def import_atif(
    source: Path = typer.Argument(..., help="An ATIF JSON file, or a folder of them."),
    out: Path = typer.Argument(..., help="Run folder to write trial folders into (tackroom view reads it)."),
) -> None:
    """Read ATIF trajectories back as tackroom trial folders (trajectory.json, and result.json where it carries one)."""
    from tackroom import ConfigError
    from tackroom_viewer.atif_files import import_files

    if not source.exists():
        raise ConfigError(f"{source}: no such file or folder")
    written, failed = import_files(source, out)
    for path, why in failed:
        typer.echo(f"not imported {path}: {why}", err=True)
    typer.echo(f"wrote {len(written)} trial folder(s) into {out}")
    if failed or not written:
        raise typer.Exit(1)


def add_commands(app: Any) -> None:
    app.command("view")(view)
    export = typer.Typer(help="Export run folders to other formats.", no_args_is_help=True)
    export.command("atif")(export_atif)
    app.add_typer(export, name="export")
    imports = typer.Typer(help="Import trajectories from other formats.", no_args_is_help=True)
    imports.command("atif")(import_atif)
    app.add_typer(imports, name="import")
