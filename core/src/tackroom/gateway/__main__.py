"""``python -m tackroom.gateway --engine URL ...``: the gateway alone, without loading plugin commands."""

from __future__ import annotations

import typer

from tackroom.cli.app import fail
from tackroom.cli.gateway_cmd import gateway
from tackroom.errors import TackroomError


def main() -> None:
    try:
        typer.run(gateway)
    except TackroomError as exc:
        raise SystemExit(fail(str(exc)).exit_code) from None


if __name__ == "__main__":
    main()
