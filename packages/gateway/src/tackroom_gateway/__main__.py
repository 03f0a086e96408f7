"""``python -m tackroom_gateway --engine URL ...``: the gateway alone, without loading plugin commands."""

from __future__ import annotations

import typer

from tackroom import TackroomError
from tackroom.app import print_error
from tackroom_gateway.cli import gateway


def main() -> None:
    try:
        typer.run(gateway)
    except TackroomError as exc:
        print_error(exc)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
