"""What every ``tackroom`` command shares, its own and a plugin's: SIGTERM handled like Ctrl-C, errors printed,
output kept whole in a file or a pipe."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from rich.console import Console
from rich.text import Text

T = TypeVar("T")

TERMINATED_EXIT_CODE = 143
"""What a command stopped by SIGTERM exits with (128 + 15, as a shell reports it)."""
INTERRUPTED_EXIT_CODE = 130
"""What a command stopped by Ctrl-C (SIGINT) exits with, after its cleanup: one line on stderr, no traceback."""
UNCUT_WIDTH = 10_000
"""How wide a command's console is when its output goes to a file or a pipe: wide enough to cut nothing."""


def run_to_completion(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` where SIGTERM and Ctrl-C stop the work alike: the main task is cancelled, so every
    ``finally`` runs (sandboxes torn down, engines and Tinker servers stopped), then one line on stderr says so
    and the process exits with :data:`TERMINATED_EXIT_CODE` or :data:`INTERRUPTED_EXIT_CODE`, also when the work
    swallowed the cancellation. Plain ``asyncio.run`` dies at once on SIGTERM (a scheduler's stop, a ``timeout``),
    leaving what the run started behind. A SIGINT the parent process ignores stays ignored."""
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        return asyncio.run(main)
    stopped: list[int] = []  # the signals that came, in order
    ways = {signal.SIGTERM: (TERMINATED_EXIT_CODE, "terminated"), signal.SIGINT: (INTERRUPTED_EXIT_CODE, "interrupted")}

    async def guarded() -> T:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        assert task is not None
        caught = [sig for sig in ways if sig == signal.SIGTERM or signal.getsignal(sig) is not signal.SIG_IGN]
        for sig in caught:  # a second Ctrl-C cancels again: a cleanup that hangs is cut short
            loop.add_signal_handler(sig, lambda sig=sig: (stopped.append(sig), task.cancel()))
        try:
            return await main
        finally:
            for sig in caught:
                loop.remove_signal_handler(sig)

    try:
        result = asyncio.run(guarded())
    except asyncio.CancelledError:
        if not stopped:
            raise
    if stopped:  # also when the work swallowed the cancellation: it was still told to stop
        code, word = ways[stopped[0]]
        print_error(f"{word}: what the run started has been stopped")
        raise SystemExit(code) from None
    return result


def command_console(stderr: bool = False) -> Console:
    """The console a command prints its output with (on stderr with ``stderr=True``). At a terminal it is rich's
    own, as wide as the window. To a file or a pipe it has no width cap and wraps no line: a table comes out at
    its natural width with a row a line and its title whole, never cut with "…" at 80 columns, so the output can
    be read back with grep (``--json`` stays the machine form). Decided when it is made: a command's output stream
    does not change while it runs."""
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console.width, console.soft_wrap = UNCUT_WIDTH, True
    return console


def print_error(message: object, console: Console | None = None) -> None:
    """``error: <message>`` on stderr (or ``console``), the message printed as it is: text such as
    ``[policy]`` or ``[/]`` in a config error is shown, not read as rich markup."""
    (console or Console(stderr=True)).print(Text("error: ", style="bold red") + Text(str(message)), soft_wrap=True)
