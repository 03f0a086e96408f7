"""``tackroom <agent> install``: put an agent harness's pinned build into the host cache ahead of a run (so the first
trials of a run do not all wait on npm)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer

from tackroom_agent_kit.npm import NpmInstallError

Install = Callable[[str | None, Path | None, float], str]
"""Installs (``version`` or the pinned one, ``cache_dir`` or the default, the npm ``timeout``) and says what it
shipped; raises :class:`~tackroom_agent_kit.NpmInstallError` (or a subclass) with the fix."""


def install_app(agent: str, *, package: str, cache_name: str, install: Install) -> typer.Typer:
    """The ``tackroom <agent>`` command group (add it in the ``tackroom_commands`` hook) with one command,
    ``install``. ``install`` is called only when the command runs, so it may import the harness lazily."""
    app = typer.Typer(help=f"The {agent} harness's host install (what is shipped into sandboxes).",
                      no_args_is_help=True)

    @app.command("install")
    def install_command(
        version: str = typer.Option(None, "--version", help=f"{package} release (default: the one the plugin pins)."),
        cache_dir: Path = typer.Option(None, "--cache-dir",
                                       help=f"Install cache (default ~/.cache/tackroom/{cache_name})."),
        timeout: float = typer.Option(600.0, "--timeout", help="Seconds the npm install may take."),
    ) -> None:
        try:
            shipped = install(version, cache_dir, timeout)
        except NpmInstallError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from exc
        typer.echo(shipped)

    install_command.__doc__ = f"Install {agent} from npm (once); print what every trial ships into its sandbox."
    return app
