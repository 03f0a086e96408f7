"""The typer application every sub-command module attaches to."""

from __future__ import annotations

import typer

from tackroom_app._command import command_console, print_error

app = typer.Typer(
    name="tackroom",
    help="Plugin framework for agentic RL: run tasks, evaluate across harnesses, train.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = command_console()
err_console = command_console(stderr=True)


def fail(message: str, code: int = 2) -> "typer.Exit":
    """Print a user-facing error and return the Exit to raise."""
    print_error(message, err_console)
    return typer.Exit(code)
