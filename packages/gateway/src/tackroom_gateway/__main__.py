"""``python -m tackroom_gateway --engine URL ...``: the gateway alone, without loading plugin commands."""

from __future__ import annotations

import typer
from rich.console import Console

from tackroom import TackroomError
from tackroom_gateway.cli import gateway


def main() -> None:
    try:
        typer.run(gateway)
    except TackroomError as exc:
        Console(stderr=True).print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
