"""Entry point: imports each sub-command module so it registers on the app."""

from __future__ import annotations

import logging

import typer

from tackroom import __version__
from tackroom._catalogue import catalogue_commands
from tackroom._errors import TackroomError
from tackroom._manager import get_plugin_manager
from tackroom_app._cli import (  # noqa: F401  (register their commands)
    plugins_cmd,
    run_cmd,
    sandbox_cmd,
)
from tackroom_app._cli.app import app, fail


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
    # One plugin at a time: a plugin whose command module is broken loses its commands,
    # not every other command of the CLI.
    for impl in get_plugin_manager().hook.tackroom_commands.get_hookimpls():
        try:
            impl.function(app=app)
        except Exception as exc:
            logging.getLogger("tackroom").warning(
                "plugin %s failed to add its commands: %s: %s", impl.plugin_name, type(exc).__name__, exc)


def command_names() -> set[str]:
    """The sub-commands the app has now (its own and those plugins added)."""
    names = {c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands}
    return names | {g.name or "" for g in app.registered_groups}


def add_missing_commands() -> None:
    """A sub-command the catalogue knows but no installed distribution added answers with its install line."""
    have = command_names()
    for known in catalogue_commands():
        if known.name in have:
            continue

        def missing(ctx: typer.Context, known=known) -> None:
            raise fail(f"`tackroom {known.name}` is provided by {known.distribution}, which is not installed: "
                       f"{known.install_hint}")

        app.command(known.name, help=f"{known.summary} (not installed: {known.install_hint})",
                    context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                                      "help_option_names": []})(missing)


def main() -> None:
    try:
        load_plugin_commands()
        add_missing_commands()
        app()
    except TackroomError as exc:
        raise SystemExit(fail(str(exc)).exit_code) from None


if __name__ == "__main__":
    main()
