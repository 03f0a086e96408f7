"""What every ``tackroom`` command shares, core's and a package's: SIGTERM handled like Ctrl-C, errors printed."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from rich.console import Console

T = TypeVar("T")

TERMINATED_EXIT_CODE = 143
"""What a command stopped by SIGTERM exits with (128 + 15, as a shell reports it)."""


def run_to_completion(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` where SIGTERM stops the work the way Ctrl-C does: the main task is cancelled, so
    every ``finally`` runs (sandboxes torn down, engines and Tinker servers stopped), then the process exits
    with :data:`TERMINATED_EXIT_CODE`. Plain ``asyncio.run`` dies at once on SIGTERM (a scheduler's stop, a
    ``timeout``), leaving what the run started behind."""
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        return asyncio.run(main)
    terminated = False

    async def guarded() -> T:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        assert task is not None

        def on_sigterm() -> None:
            nonlocal terminated
            terminated = True
            task.cancel()

        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
        try:
            return await main
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    try:
        result = asyncio.run(guarded())
    except asyncio.CancelledError:
        if terminated:
            raise SystemExit(TERMINATED_EXIT_CODE) from None
        raise
    if terminated:  # the work swallowed the cancellation; it was still told to stop
        raise SystemExit(TERMINATED_EXIT_CODE)
    return result


def print_error(message: object, console: Console | None = None) -> None:
    """``error: <message>`` on stderr (or ``console``), the message printed as it is: text such as
    ``[policy]`` or ``[/]`` in a config error is shown, not read as rich markup."""
    from rich.console import Console
    from rich.text import Text

    (console or Console(stderr=True)).print(Text("error: ", style="bold red") + Text(str(message)), soft_wrap=True)
