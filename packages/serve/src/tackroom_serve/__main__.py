"""``python -m tackroom_serve [OPTIONS]``: the service alone, without loading other plugin commands."""

from __future__ import annotations

import typer

from tackroom import TackroomError
from tackroom_app import print_error
from tackroom_serve.cli import serve


def main() -> None:
    try:
        typer.run(serve)
    except TackroomError as exc:
        print_error(exc)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
