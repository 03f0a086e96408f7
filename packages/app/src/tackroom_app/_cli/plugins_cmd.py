"""``tackroom plugins``: what is installed (and, with ``--all``, what could be)."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from tackroom._catalogue import load_catalogue
from tackroom._contract import CONTRACT_VERSION
from tackroom._manager import get_plugin_manager
from tackroom_app._cli.app import app, console, err_console


def plugin_rows(include_catalogue: bool) -> list[dict[str, Any]]:
    manager = get_plugin_manager()
    rows = [dict(e.as_dict(), installed=True) for e in manager.entries()]
    if include_catalogue:
        have = {(r["kind"], r["name"]) for r in rows}
        for c in load_catalogue():
            if (c.kind, c.name) not in have:
                rows.append({"name": c.name, "kind": c.kind, "distribution": c.distribution, "version": None,
                             "summary": c.summary, "capabilities": [], "contract": None, "usable": False,
                             "problem": "not installed", "installed": False, "install": c.install_hint,
                             "party": c.party})
    return rows


@app.command("plugins")
def plugins(
    all_: bool = typer.Option(False, "--all", help="Also list catalogue plugins that are not installed."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list of plugin objects."),
) -> None:
    """List installed plugins (harnesses, sandboxes, verifiers, losses) and trial executors.

    Each row says the plugin contract its distribution declares and whether it is usable with this
    tackroom (``usable``, and the ``problem`` when not: the method and what changed). A lazily
    registered class is checked when it is first used.
    """
    rows = plugin_rows(all_)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table("kind", "name", "distribution", "version", "contract", "summary",
                  title=f"tackroom plugins (plugin contract {CONTRACT_VERSION})")
    for r in rows:
        version = r["version"] if r["installed"] else f"[dim]not installed: {escape(r['install'])}[/]"
        summary = escape(r["summary"]) if r["usable"] or not r["installed"] else \
            f"[red]not usable[/]: {escape(r['problem'])}"
        table.add_row(r["kind"], r["name"], r["distribution"], version, str(r["contract"] or ""), summary)
    console.print(table)
    for message in get_plugin_manager().broken:
        err_console.print(f"[yellow]skipped plugin[/] {escape(message)}")
