"""The typer application every sub-command module attaches to."""

from __future__ import annotations

import typer
from rich.console import Console

from tackroom._command import print_error

app = typer.Typer(
    name="tackroom",
    help="Plugin framework for agentic RL: run tasks, evaluate across harnesses, train.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 2) -> "typer.Exit":
    """Print a user-facing error and return the Exit to raise."""
    print_error(message, err_console)
    return typer.Exit(code)
