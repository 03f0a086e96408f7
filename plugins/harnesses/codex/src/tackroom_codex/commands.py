"""``tackroom codex install``: put the pinned Codex build into the host cache ahead of a run."""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer

codex_app = typer.Typer(help="The Codex harness's host install (the binary shipped into sandboxes).",
                        no_args_is_help=True)


@codex_app.command("install")
def install(
    version: str = typer.Option(None, "--version", help="@openai/codex release (default: the one the plugin pins)."),
    cache_dir: Path = typer.Option(None, "--cache-dir", help="Install cache (default ~/.cache/tackroom/codex)."),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds the npm install may take."),
) -> None:
    """Install Codex from npm (once); print the binary every trial ships into its sandbox."""
    from tackroom_agent_kit import NpmInstallError
    from tackroom_codex.install import DEFAULT_VERSION, ensure_installed

    try:
        found = asyncio.run(ensure_installed(version or DEFAULT_VERSION, cache_dir=cache_dir, timeout=timeout))
    except NpmInstallError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"codex {found.version}: {found.binary}\nripgrep: {found.ripgrep}")
