"""Entry point: imports each sub-command module so it registers on the app."""

from __future__ import annotations

import typer

from tackroom import __version__
from tackroom._cli import (  # noqa: F401  (register their commands)
    plugins_cmd,
    run_cmd,
    sandbox_cmd,
)
from tackroom._cli.app import app, fail
from tackroom._errors import TackroomError


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tackroom {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """tackroom: harnesses, sandboxes, verifiers and losses, selected by name."""


def load_plugin_commands() -> None:
    """Let plugins add their sub-commands (the ``tackroom_commands`` hook)."""
    import logging

    from tackroom._manager import get_plugin_manager

    # One plugin at a time: a plugin whose command module is broken loses its commands,
    # not every other command of the CLI.
    for impl in get_plugin_manager().hook.tackroom_commands.get_hookimpls():
        try:
            impl.function(app=app)
        except Exception as exc:
            logging.getLogger("tackroom").warning(
                "plugin %s failed to add its commands: %s: %s", impl.plugin_name, type(exc).__name__, exc)


def main() -> None:
    try:
        load_plugin_commands()
        app()
    except TackroomError as exc:
        raise SystemExit(fail(str(exc)).exit_code) from None


if __name__ == "__main__":
    main()
