"""``tackroom claude-code install``: put the pinned Claude Code build into the host cache ahead of a run."""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer

claude_code_app = typer.Typer(help="The Claude Code harness's host install (the binary shipped into sandboxes).",
                              no_args_is_help=True)


@claude_code_app.command("install")
def install(
    version: str = typer.Option(None, "--version", help="@anthropic-ai/claude-code release (default: the pinned one)."),
    cache_dir: Path = typer.Option(None, "--cache-dir", help="Install cache (default ~/.cache/tackroom/claude-code)."),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds the npm install may take."),
) -> None:
    """Install Claude Code from npm (once); print the binary every trial ships into its sandbox."""
    from tackroom_claude_code.install import DEFAULT_VERSION, ClaudeCodeInstallError, ensure_installed

    try:
        found = asyncio.run(ensure_installed(version or DEFAULT_VERSION, cache_dir=cache_dir, timeout=timeout))
    except ClaudeCodeInstallError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"claude-code {found.version}: {found.binary}")
