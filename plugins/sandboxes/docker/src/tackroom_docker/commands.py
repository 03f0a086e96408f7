"""``tackroom images``: offline base images and the task-image cache (added through ``tackroom_commands``)."""

from __future__ import annotations

import asyncio
import json

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tackroom import TackroomError

images_app = typer.Typer(help="Docker images tackroom builds: offline base images and cached task images.", no_args_is_help=True)


def _command_console(stderr: bool = False) -> Console:
    # tackroom_app.command_console's rule (this plugin does not depend on tackroom-app): to a file or a pipe, no width
    # cap and no wrapping, so a table's row comes out whole instead of cut with "…" at 80 columns
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console.width, console.soft_wrap = 10_000, True
    return console


console = _command_console()
err_console = _command_console(stderr=True)


def _fail(message: str) -> typer.Exit:
    # printed as it is (text such as `[policy]` is not rich markup), as the tackroom command prints errors
    err_console.print(Text("error: ", style="bold red") + Text(message), soft_wrap=True)
    return typer.Exit(2)


@images_app.command("bootstrap")
def bootstrap_cmd(
    tag: list[str] = typer.Option(["debian:bookworm-slim"], "--tag", help="Base image(s) to make available."),
    force: bool = typer.Option(False, "--force", help="Import again even when the tag exists."),
    refresh: bool = typer.Option(False, "--refresh", help="Run debootstrap again instead of using the cached archive."),
    mirror: str = typer.Option("http://deb.debian.org/debian", "--mirror", help="Debian mirror for debootstrap and apt."),
    security_mirror: str = typer.Option("http://deb.debian.org/debian-security", "--security-mirror"),
    timeout: float = typer.Option(900.0, "--timeout", help="Seconds allowed per image."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per image."),
) -> None:
    """Build base images from Debian's packages (debootstrap + docker import); no registry needed."""
    from tackroom_docker.base_images import bootstrap

    for name in tag:
        try:
            result = asyncio.run(
                bootstrap(
                    name, force=force, refresh=refresh, mirror=mirror, security_mirror=security_mirror, timeout=timeout,
                    progress=lambda line: err_console.print(f"[dim]{line}…[/]", highlight=False),
                )
            )
        except TackroomError as exc:
            raise _fail(str(exc)) from None
        if as_json:
            typer.echo(result.model_dump_json())
        elif result.action == "present":
            console.print(f"{name} is already present ({(result.image_id or '')[:19]}); --force imports it again")
        else:
            console.print(f"{name} {result.action} in {result.duration_s:.1f}s (archive {result.archive})")


@images_app.command("list")
def list_cmd(as_json: bool = typer.Option(False, "--json", help="Print a JSON list.")) -> None:
    """List images tackroom made: bootstrapped base images and cached task images."""
    from tackroom_docker.engine import DockerCLI

    async def listing() -> list[dict[str, str]]:
        result = await DockerCLI().check(
            ["images", "--filter", "label=tackroom.managed=1", "--format", "{{json .}}"], timeout=60
        )
        return [json.loads(line) for line in result.out.splitlines() if line.strip()]

    try:
        rows = asyncio.run(listing())
    except TackroomError as exc:
        raise _fail(str(exc)) from None
    items = [
        {
            "image": f"{r['Repository']}:{r['Tag']}",
            "id": r["ID"],
            "kind": "task" if r["Repository"] == "tackroom-env" else "base",
            "created": r["CreatedSince"],
            "size": r["Size"],
        }
        for r in rows
    ]
    if as_json:
        typer.echo(json.dumps(items, indent=2))
        return
    table = Table(title="tackroom images")
    for col in ("image", "kind", "id", "created", "size"):
        table.add_column(col)
    for item in items:
        table.add_row(item["image"], item["kind"], item["id"], item["created"], item["size"])
    console.print(table)
