"""``tackroom opencode install``: put the pinned OpenCode build into the host cache ahead of a run."""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer

opencode_app = typer.Typer(help="The OpenCode harness's host install (the binary shipped into sandboxes).",
                           no_args_is_help=True)


@opencode_app.command("install")
def install(
    version: str = typer.Option(None, "--version", help="opencode-ai release (default: the one the plugin pins)."),
    cache_dir: Path = typer.Option(None, "--cache-dir", help="Install cache (default ~/.cache/tackroom/opencode)."),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds the npm install may take."),
) -> None:
    """Install OpenCode from npm (once); print the binary every trial ships into its sandbox."""
    from tackroom_opencode.install import DEFAULT_VERSION, OpenCodeInstallError, ensure_installed

    try:
        found = asyncio.run(ensure_installed(version or DEFAULT_VERSION, cache_dir=cache_dir, timeout=timeout))
    except OpenCodeInstallError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"opencode {found.version}: {found.binary}\nripgrep: {found.ripgrep}")
