"""One headless agent run inside a sandbox, driven from the host through ``agentctl.sh`` (start, poll, stop).

The agent runs in its own session with its stdin, stdout and stderr in files under ``ROOT/run``; every process it
starts carries ``TACKROOM_AGENT_RUN=<token>`` in its environment, so :meth:`AgentControl.stop` ends them all, also
those that left its session."""

from __future__ import annotations

import asyncio
import importlib.resources
import secrets
import shlex
from dataclasses import dataclass

from tackroom import ExecResult, InfraError, Sandbox, SandboxError

SCRIPT = "agentctl.sh"
RUN_MARK = "TACKROOM_AGENT_RUN"


class AgentControlError(InfraError):
    """The control script could not start or look at the agent in the sandbox."""


@dataclass(frozen=True)
class AgentState:
    """One look at the run: whether the agent's process lives, its exit status once it has one (``None`` before),
    and the sizes of its output files (stdout, stderr, its own logs): a size that changes is progress."""

    alive: bool
    exit_code: str | None
    sizes: tuple[int, int, int]


class AgentControl:
    """The run of one agent under ``root`` in the sandbox (the script at ``root/agentctl.sh``, the run's files in
    ``root/run``); ``log_glob`` (relative to ``root``) names the agent's own log files, counted as progress."""

    def __init__(self, root: str, *, agent: str, log_glob: str | None = None) -> None:
        self.root = root.rstrip("/")
        self.agent = agent
        self.log_glob = log_glob
        self.token = secrets.token_hex(8)

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    @property
    def _script(self) -> str:
        return f"bash {shlex.quote(self.path(SCRIPT))}"

    async def install(self, sandbox: Sandbox) -> None:
        """Put the control script into the sandbox (setup)."""
        script = importlib.resources.files("tackroom_agent_kit") / "sandbox_side" / SCRIPT
        with importlib.resources.as_file(script) as local:
            await sandbox.upload(local, self.path(SCRIPT), timeout=60)

    def env(self) -> dict[str, str]:
        """What the agent's environment must hold for :meth:`stop` to find every process of the run."""
        return {RUN_MARK: self.token}

    async def start(self, sandbox: Sandbox, argv: list[str], *, env: dict[str, str], stdin: str = "",
                    prelude: str = "") -> None:
        """Start ``argv`` with ``stdin`` on its standard input; ``prelude`` is shell run first (``export PATH=...``)."""
        await sandbox.write_file(self.path("run", "stdin"), stdin, timeout=60)
        cmd = f"{prelude}{self._script} start {shlex.quote(self.root)} {shlex.join(argv)}"
        result = await sandbox.exec(cmd, env={**env, **self.env()}, timeout=60)
        if not result.ok:
            raise AgentControlError(f"could not start {self.agent} in the sandbox (exit {result.exit_code}): "
                                    f"{(result.stderr or result.stdout).strip()[-1000:]}")

    async def poll(self, sandbox: Sandbox) -> AgentState:
        """One look at the run. At the sandbox's memory limit the kernel may kill the poll itself rather than the
        agent (SIGKILL: -9 or 137); the memory is free again once the agent is gone, so look again."""
        glob = f" {shlex.quote(self.log_glob)}" if self.log_glob else ""
        cmd = f"{self._script} poll {shlex.quote(self.root)}{glob}"
        result: ExecResult | None = None
        for attempt in range(4):
            result = await sandbox.exec(cmd, timeout=60)
            if result.exit_code not in (-9, 137):
                break
            await asyncio.sleep(0.5 * (attempt + 1))
        assert result is not None
        fields = result.stdout.split()
        if not result.ok or len(fields) != 5:
            raise AgentControlError(f"could not check on {self.agent} (exit {result.exit_code}): "
                                    f"{(result.stderr or result.stdout).strip()[-1000:]}")
        alive, code = fields[0] == "1", fields[1]
        return AgentState(alive=alive, exit_code=None if code == "-" else code,
                          sizes=(int(fields[2]), int(fields[3]), int(fields[4])))

    async def stop(self, sandbox: Sandbox, grace: int) -> None:
        """TERM, then KILL after ``grace`` seconds, the agent and everything it started; never raises."""
        try:
            await sandbox.exec(f"{self._script} stop {shlex.quote(self.root)} {self.token} {grace}", timeout=grace + 30)
        except (SandboxError, OSError):
            pass  # the sandbox is gone (or wedged); its teardown ends every process in it

    async def read(self, sandbox: Sandbox, name: str) -> str:
        """A file of the run (``stdout.log``, ``stderr.log``, ``exit_code``), empty when absent."""
        try:
            return (await sandbox.read_file(self.path("run", name), timeout=120)).decode(errors="replace")
        except FileNotFoundError:
            return ""

    async def tails(self, sandbox: Sandbox, chars: int, label: str) -> str:
        """The last ``chars`` of the agent's stderr and of its newest own log file (``log_glob``), each under a
        ``--- LABEL stderr (tail) ---`` heading, for an error message; empty when ``chars`` is 0, when there is
        nothing to show or when the sandbox is gone (the error being reported matters more than its tail)."""
        if chars <= 0:
            return ""
        files = {"stderr": shlex.quote(self.path("run", "stderr.log"))}
        if self.log_glob:
            files["log"] = f'"$(ls -t {shlex.quote(self.root)}/{self.log_glob} 2>/dev/null | head -n1)"'
        marker = f"--- tackroom tail {self.token} ---"
        cmd = "; ".join(f"echo '{marker}'; tail -c {chars} {path} 2>/dev/null" for path in files.values())
        try:
            result = await sandbox.exec(cmd, timeout=60)
        except (SandboxError, OSError):
            return ""
        texts = result.stdout.split(marker + "\n")[1:]
        return "".join(f"\n--- {label} {name} (tail) ---\n{text.strip()}"
                       for name, text in zip(files, texts) if text.strip())
