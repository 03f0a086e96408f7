"""``tackroom sandbox``: provider-level maintenance (``cleanup`` of leaked sandboxes)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import typer

from tackroom._config import PluginSelection
from tackroom._errors import ConfigError, TackroomError
from tackroom_app._cli.app import app, console, fail
from tackroom_app._resolve import instantiate

sandbox_app = typer.Typer(help="Sandbox provider maintenance.", no_args_is_help=True)
app.add_typer(sandbox_app, name="sandbox")


def parse_options(pairs: list[str], flag: str = "--option") -> dict[str, Any]:
    """``KEY=VALUE`` pairs; a VALUE that parses as JSON (numbers, booleans, lists) is taken as such."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip() or key.strip() == "name":
            raise ConfigError(f"{flag} {pair!r}: expected KEY=VALUE (e.g. {flag} max_turns=5)")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        options[key.strip()] = value
    return options


@sandbox_app.command("cleanup")
def cleanup(
    sandbox: str = typer.Option(..., "--sandbox", "-s", help="Sandbox provider name (see `tackroom plugins`)."),
    option: list[str] = typer.Option([], "--option", "-o", help="Provider option KEY=VALUE; repeatable."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds allowed for the cleanup."),
    as_json: bool = typer.Option(False, "--json", help='Print {"sandbox": NAME, "removed": N}.'),
) -> None:
    """Remove sandboxes a provider started and never removed (leaked by a crash or a kill)."""
    try:
        provider = instantiate("sandbox", PluginSelection(name=sandbox, **parse_options(option)))
        removed = asyncio.run(asyncio.wait_for(provider.cleanup(), timeout))
    except TackroomError as exc:
        raise fail(str(exc)) from None
    except TimeoutError:
        raise fail(f"cleanup of {sandbox} sandboxes did not finish within {timeout:g}s") from None
    if as_json:
        typer.echo(json.dumps({"sandbox": sandbox, "removed": removed}))
    else:
        console.print(f"removed {removed} leaked {sandbox} sandbox{'es' if removed != 1 else ''}")
