"""``python -m tackroom_gateway --engine URL ...``: the gateway alone, without loading plugin commands."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.text import Text

from tackroom import TackroomError
from tackroom_gateway.cli import gateway


def main() -> None:
    try:
        typer.run(gateway)
    except TackroomError as exc:
        # printed as it is (text such as `[policy]` is not rich markup), as the tackroom command prints errors
        Console(stderr=True).print(Text("error: ", style="bold red") + Text(str(exc)), soft_wrap=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
