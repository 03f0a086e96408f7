"""A tmux session inside a sandbox, driven only through ``Sandbox.exec`` and ``write_file``.

The session runs ``bash --login`` in a fixed-size window with a long history.
Keystrokes go in with ``send-keys`` (a whole-string tmux key name such as
``C-c`` as that key, anything else literally); long text goes through a paste
buffer loaded from a file, so no command line limit or shell quoting applies.
The terminal is read with ``capture-pane``: :meth:`TmuxSession.observe` returns
only what is new since the last observation when the history still starts with
what was seen before, else the visible screen, either capped with a marker.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import signal
import uuid

from tackroom import ModelError, Sandbox, SandboxError, SandboxTimeoutError, TaskError

QUICK_S = 5.0
"""Seconds a tmux command gets before the harness looks at whether its server was stopped."""


class TmuxStoppedError(ModelError):
    """The agent's commands stopped the tmux server the harness drives (SIGSTOP): the model's failure."""

# Keystrokes that are exactly one of these are sent as the key, not typed as text.
_NAMED_KEYS = (
    "Enter|Escape|Tab|BTab|BSpace|Space|Up|Down|Left|Right|Home|End|IC|DC|"
    "PageUp|PageDown|PgUp|PgDn|PPage|NPage|F[1-9]|F1[0-2]"
)
KEY_NAME = re.compile(rf"^(?:(?:[CMS]-)+(?:[A-Za-z0-9@\[\]\\^_/?]|{_NAMED_KEYS})|{_NAMED_KEYS})$")


def is_key_name(keystrokes: str) -> bool:
    """True when ``keystrokes`` is a single tmux key name (``C-c``, ``Escape``, ``M-x``, ``Up`` …)."""
    return bool(KEY_NAME.fullmatch(keystrokes))


def cap_output(text: str, limit_bytes: int) -> str:
    """Keep the head and tail of ``text`` within ``limit_bytes`` (UTF-8), with a marker saying what was cut."""
    data = text.encode()
    if len(data) <= limit_bytes:
        return text
    half = limit_bytes // 2
    head = data[:half].decode(errors="ignore")
    tail = data[-half:].decode(errors="ignore")
    omitted = len(data) - len(head.encode()) - len(tail.encode())
    return f"{head}\n[... output limited to {limit_bytes} bytes; {omitted} interior bytes omitted ...]\n{tail}"


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip().split("\n")] if text.strip() else []


class Observation(str):
    """Terminal text for the model, plus whether it is only the new part (``incremental``)."""

    incremental: bool

    def __new__(cls, text: str, incremental: bool) -> Observation:
        obj = super().__new__(cls, text)
        obj.incremental = incremental
        return obj

    def render(self) -> str:
        title = "New terminal output" if self.incremental else "Current terminal screen"
        return f"{title}:\n{self}" if str(self).strip() else f"{title}: (empty)"


def _exit(code: int) -> str:
    """``exit N``, naming the signal when tmux itself was killed by one (``128 + N`` from a shell, ``-N``)."""
    number = -code if code < 0 else code - 128 if 128 < code < 193 else 0
    try:
        return f"exit {code}, killed by {signal.Signals(number).name}" if number else f"exit {code}"
    except ValueError:
        return f"exit {code}"


class TmuxSession:
    """One tmux session in one sandbox; create it with :meth:`start`."""

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        name: str = "terminus",
        width: int = 160,
        height: int = 40,
        history_limit: int = 50_000,
        paste_threshold: int = 512,
        output_limit_bytes: int = 10_000,
        exec_timeout: float = 30.0,
    ) -> None:
        self.sandbox = sandbox
        self.name = name
        self.width = width
        self.height = height
        self.history_limit = history_limit
        self.paste_threshold = paste_threshold
        self.output_limit_bytes = output_limit_bytes
        self.exec_timeout = exec_timeout
        self._seen: list[str] | None = None
        self.exec_seconds = 0.0
        """Time spent in ``Sandbox.exec``/``write_file`` on behalf of this session."""

    async def _tmux(self, *args: str, check: bool = True) -> str:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        try:
            # A tmux command takes milliseconds; one that does not answer within QUICK_S is looked into (a server
            # the agent stopped never answers), then given the rest of its time.
            quick = min(QUICK_S, self.exec_timeout)
            try:
                result = await self.sandbox.exec(["tmux", *args], timeout=quick)
            except SandboxTimeoutError:
                await self._check_not_stopped(args[0])
                result = await self.sandbox.exec(["tmux", *args], timeout=max(self.exec_timeout - quick, 1.0))
        finally:
            self.exec_seconds += loop.time() - t0
        if check and not result.ok:
            said = (result.stderr or result.stdout).strip()[:500]
            gone = " (the tmux server is gone: it crashed or was killed, by a signal or the OOM killer)" if (
                "no server running" in said or "server exited" in said) else ""
            raise SandboxError(f"tmux {args[0]} failed in the sandbox ({_exit(result.exit_code)}): {said}{gone}")
        return result.stdout

    async def _check_not_stopped(self, command: str) -> None:
        """Raise :class:`TmuxStoppedError` when the tmux server is stopped (state T: SIGSTOP, SIGTSTP): only the
        agent's own commands can do that, and it answers nothing until the agent timeout."""
        probe = ("for d in /proc/[0-9]*; do c=$(cat $d/comm 2>/dev/null); case $c in tmux*) "
                 "s=$(sed 's/.*) //' $d/stat 2>/dev/null | cut -d' ' -f1); [ \"$s\" = T ] && echo \"${d#/proc/} $c\";; "
                 "esac; done")
        try:
            result = await self.sandbox.exec(probe, timeout=QUICK_S)
        except SandboxTimeoutError:
            return
        if result.stdout.strip():
            raise TmuxStoppedError(
                f"tmux {command} got no answer: the tmux server is stopped ({result.stdout.split()[0]}, state T); "
                "the agent's commands stopped their own terminal (kill -STOP), counted as the model's")

    async def start(self) -> None:
        """Start the session (replacing one of the same name) and wait for the shell's first output."""
        await self._tmux("kill-session", "-t", self.name, check=False)
        # history-limit applies to windows created after it is set, so set it before the session exists.
        await self._tmux(
            "start-server", ";", "set-option", "-g", "history-limit", str(self.history_limit), ";",
            "new-session", "-d", "-s", self.name, "-x", str(self.width), "-y", str(self.height), "bash --login",
        )
        await self._tmux("set-option", "-t", self.name, "status", "off", check=False)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not (await self.screen()).strip():
            if loop.time() > deadline:
                raise TaskError(f"the shell in tmux session {self.name!r} printed no prompt within 10 s; does the image have bash?")
            await asyncio.sleep(0.1)

    async def alive(self) -> bool:
        result = await self.sandbox.exec(["tmux", "has-session", "-t", self.name], timeout=self.exec_timeout)
        return result.ok

    async def send(self, keystrokes: str) -> None:
        """Type ``keystrokes`` (or press the key they name)."""
        if not keystrokes:
            return
        if is_key_name(keystrokes):
            await self._tmux("send-keys", "-t", self.name, keystrokes)
        elif len(keystrokes.encode()) <= self.paste_threshold:
            await self._tmux("send-keys", "-t", self.name, "-l", "--", keystrokes)
        else:
            await self.paste(keystrokes)

    async def paste(self, text: str) -> None:
        """Type long text through a tmux paste buffer loaded from a file (no quoting, no argv limit)."""
        buffer = f"tackroom-{uuid.uuid4().hex[:8]}"
        path = f"/tmp/.{buffer}"
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        try:
            await self.sandbox.write_file(path, text, timeout=self.exec_timeout)
        finally:
            self.exec_seconds += loop.time() - t0
        script = (
            f"tmux load-buffer -b {buffer} {shlex.quote(path)} && "
            f"tmux paste-buffer -d -b {buffer} -t {shlex.quote(self.name)}; rc=$?; rm -f {shlex.quote(path)}; exit $rc"
        )
        t0 = loop.time()
        try:
            result = await self.sandbox.exec(script, timeout=self.exec_timeout)
        finally:
            self.exec_seconds += loop.time() - t0
        if not result.ok:
            raise SandboxError(f"tmux paste failed (exit {result.exit_code}): {result.stderr.strip()[:500]}")

    async def screen(self) -> str:
        """The visible pane."""
        return (await self._tmux("capture-pane", "-p", "-J", "-t", self.name)).rstrip()

    async def history(self) -> str:
        """Everything in the pane's history plus the visible screen."""
        return await self._tmux("capture-pane", "-p", "-J", "-S", "-", "-t", self.name)

    async def observe(self) -> Observation:
        """What the model should see now: new output since the last call, or the screen when that is unclear."""
        lines = _lines(await self.history())
        seen, self._seen = self._seen, lines
        if seen is not None:
            # The last line seen is usually the prompt the model then typed on: show it again, completed.
            keep = seen[:-1]
            if lines[: len(keep)] == keep and len(lines) >= len(keep):
                new = "\n".join(lines[len(keep):])
                return Observation(cap_output(new, self.output_limit_bytes), incremental=True)
        return Observation(cap_output(await self.screen(), self.output_limit_bytes), incremental=False)
