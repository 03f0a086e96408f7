"""The ``codex`` harness: OpenAI's Codex CLI, the real agent, headless inside the sandbox.

Setup ships the pinned static ``codex`` binary (and its ``rg``) from the host's install into the sandbox under
``sandbox_dir``: nothing is downloaded at trial time. Run writes ``config.toml`` into ``CODEX_HOME`` (one provider,
the trial's policy over OpenAI Responses, reached through a :class:`~tackroom_agent_kit.ModelRelay` that counts calls,
enforces the turn limit and fills in the policy's sampling), starts ``codex exec --json`` in its own session,
watches it, and turns its JSONL events into the trajectory's messages and metrics. The agent timeout, a hang and the
turn limit stop every process Codex started.
"""

from __future__ import annotations

import asyncio
import shlex
import signal
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from tackroom import ConfigError, Harness, PluginOptions, Policy, Sandbox, SandboxError, Task, Trajectory
from tackroom_agent_kit import (
    AgentControl,
    AgentControlError,
    ModelRelay,
    check_reachable,
    reach_relay,
    served_context_length,
)
from tackroom_codex.config import (
    API_KEY_ENV,
    COMPACT_PROMPT,
    CodexSettings,
    McpServer,
    build_config,
    catalog_json,
    to_toml,
    uses_catalog,
)
from tackroom_codex.errors import CodexCrashError, CodexModelError, CodexSetupError, CodexTimeoutError
from tackroom_codex.events import Episode, parse_events
from tackroom_codex.install import DEFAULT_VERSION, CodexInstall, ensure_installed
from tackroom_codex.sampling import ResponsesSamplingMiddleware, responses_sampling
from tackroom_sandbox_kit import describe_exit, exit_signal
from tackroom_worlds import mount_world_files

AGENT = "Codex"


class CodexOptions(PluginOptions):
    """The ``[harness]`` section when ``name = "codex"``."""

    version: str = Field(default=DEFAULT_VERSION, description="The @openai/codex release to run (installed from npm once)")
    cache_dir: str | None = Field(default=None, description="Host install cache (default ~/.cache/tackroom/codex)")
    install_timeout_sec: float = Field(default=600.0, gt=0, description="Limit for the one-time npm install")
    profile: Literal["auto", "full", "compact"] = Field(
        default="auto",
        description="full: Codex's own system prompt (~4k tokens); compact: a short prompt and no AGENTS.md, for "
        "small-context models; auto: compact when the model's context is below compact_below_context")
    compact_below_context: int = Field(default=16384, gt=0, description="auto picks compact below this context length")
    prompt: str | None = Field(default=None, description="System prompt replacing the profile's")
    max_turns: int | None = Field(default=50, gt=0, description="Model calls per episode (enforced by the relay)")
    max_tokens_per_turn: int | None = Field(
        default=None, gt=0,
        description="Output limit per turn unless the policy's sampling sets max_tokens (default: 4096 full, 512 compact)")
    context_length: int | None = Field(default=None, gt=0, description="The model's context (default: asked from the policy's /models)")
    mcp_servers: dict[str, McpServer] = Field(default_factory=dict, description="MCP servers to give Codex (none by default)")
    sandbox_dir: str = Field(default="/opt/codex", description="Where Codex, its config and state live in the sandbox")
    hang_timeout_sec: float = Field(
        default=900.0, gt=0,
        description="No output and no model call in flight for this long is a hang; Codex's exec_command yields "
        "after at most 30 s, so a legitimate run is never silent for long")
    max_model_errors: int = Field(default=3, ge=1, description="Failed model calls after which the endpoint counts as down (infra)")
    model_retries: int = Field(default=1, ge=0, description="Codex's own retries of a failed model request or stream")
    timeout_margin_sec: float = Field(
        default=5.0, ge=0,
        description="Stop Codex this long (at most a fifth of the agent timeout) before the agent timeout, to keep its trajectory")
    kill_grace_sec: int = Field(default=1, ge=0, description="Seconds between TERM and KILL when stopping Codex")
    poll_interval_sec: float = Field(default=1.0, gt=0, description="Longest pause between progress checks")
    log_tail_chars: int = Field(default=1500, ge=0, description="How much of Codex's stderr an error message carries")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for Codex")


class CodexHarness(Harness):
    """OpenAI Codex CLI (@openai/codex), the real agent, headless in the sandbox; its model calls go through the
    policy gateway's Responses dialect."""

    name = "codex"
    Options = CodexOptions
    capabilities = frozenset({"chat", "needs_policy", "agent_in_sandbox"})
    options: CodexOptions

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.install: CodexInstall | None = None
        self.world_note: str | None = None
        self.control = AgentControl(self.options.sandbox_dir, agent=AGENT)

    def _path(self, *parts: str) -> str:
        return self.control.path(*parts)

    # -- setup -------------------------------------------------------------------------
    async def setup(self, sandbox: Sandbox, task: Task) -> None:
        self.world_note = await mount_world_files(sandbox, task)  # a world task's data, where its instruction says
        self.install = await ensure_installed(
            self.options.version,
            cache_dir=Path(self.options.cache_dir).expanduser() if self.options.cache_dir else None,
            timeout=self.options.install_timeout_sec,
        )
        dirs = " ".join(shlex.quote(self._path(p)) for p in ("bin", "run", "home"))
        await self._must(sandbox, f"mkdir -p {dirs}", "create Codex's directories", timeout=60)
        await self.control.install(sandbox)
        await sandbox.upload(self.install.binary, self._path("bin", "codex"), timeout=300)
        await sandbox.upload(self.install.ripgrep, self._path("bin", "rg"), timeout=60)
        binary = shlex.quote(self._path("bin", "codex"))
        await self._must(sandbox, f"chmod 755 {binary} {shlex.quote(self._path('bin', 'rg'))}",
                         "make Codex executable", timeout=60)
        home = shlex.quote(self._path("home"))
        result = await sandbox.exec(f"CODEX_HOME={home} {binary} --version", timeout=120)
        if not result.ok or result.stdout.strip() != f"codex-cli {self.options.version}":
            detail = (result.stderr or result.stdout).strip()[-1000:]
            if exit_signal(result.exit_code) is not None:
                raise CodexCrashError(f"Codex {self.options.version} {describe_exit(result.exit_code)} at start-up "
                                      f"(`codex --version`): {detail}")
            raise CodexSetupError(f"Codex {self.options.version} does not run in this sandbox "
                                  f"(exit {result.exit_code}): {detail}")

    async def _must(self, sandbox: Sandbox, cmd: str, what: str, *, timeout: float) -> None:
        result = await sandbox.exec(cmd, timeout=timeout)
        if not result.ok:
            raise CodexSetupError(f"could not {what} in the sandbox (exit {result.exit_code}): "
                                  f"{(result.stderr or result.stdout).strip()[-1000:]}")

    # -- run ---------------------------------------------------------------------------
    async def run(self, task: Task, sandbox: Sandbox, policy: Policy | None) -> Trajectory:
        if policy is None:
            raise ConfigError("the codex harness calls a model: set [policy] base_url (e.g. `tackroom model up`)")
        if self.install is None:
            raise RuntimeError("CodexHarness.run called before setup")
        timeout = task.config.agent.timeout_sec
        deadline = time.monotonic() + timeout - min(self.options.timeout_margin_sec, timeout / 5)
        context = self.options.context_length or await served_context_length(policy) or 32768
        profile = self.options.profile
        if profile == "auto":
            profile = "compact" if context < self.options.compact_below_context else "full"
        relay = ModelRelay(policy.base_url, max_calls=self.options.max_turns, what=AGENT)
        relay.app.add_middleware(ResponsesSamplingMiddleware,
                                 defaults=responses_sampling(policy.sampling, self._max_output(profile, context)))
        async with relay:
            inside = await reach_relay(sandbox, relay, policy.base_url, AGENT)
            settings = self._settings(policy, f"{inside}/v1", context, profile)
            await sandbox.write_file(self._path("home", "config.toml"), to_toml(build_config(settings)), timeout=60)
            if uses_catalog(settings):
                await sandbox.write_file(self._path("home", "catalog.json"), catalog_json(settings), timeout=60)
            await check_reachable(sandbox, inside, policy.base_url, AGENT)
            ended = await self._run_codex(sandbox, task, policy, relay, deadline)
        return await self._outcome(sandbox, task, policy, relay, ended, profile, context)

    def _max_output(self, profile: str, context: int) -> int:
        wanted = self.options.max_tokens_per_turn or (512 if profile == "compact" else 4096)
        return max(16, min(wanted, context // 4))

    def _settings(self, policy: Policy, base_url: str, context: int, profile: str) -> CodexSettings:
        prompt = self.options.prompt if self.options.prompt is not None else (
            COMPACT_PROMPT if profile == "compact" else None)
        return CodexSettings(base_url=base_url, model=policy.model, context_length=context, profile=profile,
                             prompt=prompt, catalog_path=self._path("home", "catalog.json"),
                             mcp_servers=self.options.mcp_servers, retries=self.options.model_retries)

    def _env(self, policy: Policy) -> dict[str, str]:
        env = {
            "CODEX_HOME": self._path("home"),
            API_KEY_ENV: policy.api_key,
            # Codex reads these from the environment too; nothing in the trial may point it elsewhere.
            "OPENAI_API_KEY": "",
            "OPENAI_BASE_URL": "",
            "CODEX_API_KEY": "",
            "NO_COLOR": "1",
        }
        env.update(self.options.env)
        return env

    async def _run_codex(self, sandbox: Sandbox, task: Task, policy: Policy, relay: ModelRelay,
                         deadline: float) -> str:
        """Start Codex, watch it until it ends (how: see :meth:`_watch`), and stop everything it started."""
        grace = self.options.kill_grace_sec
        try:
            await self._start(sandbox, task, policy)
            ended = await self._watch(sandbox, relay, deadline)
        except asyncio.CancelledError:
            # The runtime's agent timeout: no time left for a grace period, and nothing may outlive the run.
            stop = asyncio.ensure_future(self.control.stop(sandbox, grace=0))
            try:
                await asyncio.shield(stop)
            except asyncio.CancelledError:
                await stop
            raise
        except BaseException:
            await self.control.stop(sandbox, grace)
            raise
        await self.control.stop(sandbox, grace)
        return ended

    async def _start(self, sandbox: Sandbox, task: Task, policy: Policy) -> None:
        argv = [self._path("bin", "codex"), "exec", "--json", "--strict-config", "--skip-git-repo-check",
                "--color", "never", "-"]
        prelude = f'export PATH={shlex.quote(self._path("bin"))}:"$PATH"; '
        try:
            await self.control.start(sandbox, argv, env=self._env(policy), stdin=task.instruction, prelude=prelude)
        except AgentControlError as exc:
            raise CodexCrashError(str(exc)) from exc

    async def _watch(self, sandbox: Sandbox, relay: ModelRelay, deadline: float) -> str:
        """Wait until Codex exits (``exited``), dies (``died``), is refused a call past the turn limit
        (``max_turns``), keeps failing to reach the model (``model_errors``), makes no progress with no model
        call in flight (``hang``), or the deadline passes (``timeout``)."""
        last_sizes: tuple[int, ...] | None = None
        last_progress = time.monotonic()
        pause = 0.2
        while True:
            try:
                state = await self.control.poll(sandbox)
            except AgentControlError as exc:
                raise CodexCrashError(str(exc)) from exc
            now = time.monotonic()
            if state.exit_code is not None:
                return "exited"
            if not state.alive:
                return "died"
            if relay.limit_reached:
                return "max_turns"
            if relay.failures >= self.options.max_model_errors:
                return "model_errors"
            if state.sizes != last_sizes or relay.in_flight:
                last_sizes, last_progress = state.sizes, now
            if now >= deadline:
                return "timeout"
            if now - max(last_progress, relay.last_activity) >= self.options.hang_timeout_sec:
                return "hang"
            await asyncio.sleep(max(0.0, min(pause, deadline - now)))
            pause = min(pause * 1.5, self.options.poll_interval_sec)

    async def _outcome(self, sandbox: Sandbox, task: Task, policy: Policy, relay: ModelRelay, ended: str,
                       profile: str, context: int) -> Trajectory:
        """The trajectory, or the classified error carrying it."""
        episode = parse_events(await self.control.read(sandbox, "stdout.log"))
        trajectory = self._trajectory(task.instruction, episode, profile, context)
        exit_code = (await self.control.read(sandbox, "exit_code")).strip()
        if relay.limit_reached:
            # The relay refused the call after the last allowed turn; Codex gives up on that 400, and the episode
            # ends there, like any turn limit.
            trajectory.stop_reason = "max_turns"
            return trajectory
        if ended == "timeout":
            trajectory.stop_reason = "agent_timeout"
            raise CodexTimeoutError(
                f"Codex was still working at the agent timeout ({task.config.agent.timeout_sec:g}s) "
                f"after {len(episode.steps)} turns; it was stopped", trajectory)
        if ended == "hang":
            trajectory.stop_reason = "hang"
            raise _crash(f"Codex made no progress for {self.options.hang_timeout_sec:g}s and was stopped"
                         + await self._logs(sandbox), _answered(episode, relay), trajectory)
        if ended == "model_errors" or (episode.failure is not None and relay.failures
                                       and _endpoint_failed(episode, relay)):
            trajectory.stop_reason = "endpoint_failing"
            raise CodexCrashError(
                f"the model endpoint {policy.base_url} failed {relay.failures} calls (last: {relay.last_failure}); "
                "Codex was stopped" + await self._logs(sandbox), trajectory)
        if episode.failure is not None:
            failure = episode.failure
            if failure.context_exhausted:
                trajectory.stop_reason = "context_exhausted"
                raise CodexModelError(f"the conversation outgrew the model's context ({context} tokens): "
                                      f"{failure.message}", trajectory)
            status = failure.status_code
            if status is not None and 400 <= status < 500 and status not in (401, 403, 404, 408, 429):
                trajectory.stop_reason = "model_error"
                raise CodexModelError(f"the policy endpoint rejected Codex's request: {failure.message}", trajectory)
            trajectory.stop_reason = "codex_error"
            raise _crash(f"Codex stopped on an error: {failure.message}" + await self._logs(sandbox),
                         _answered(episode, relay), trajectory)
        if ended == "died" or exit_code != "0":
            trajectory.stop_reason = "codex_crashed"
            how = describe_exit(exit_code)
            if exit_signal(exit_code) == signal.SIGKILL:  # inside a sandbox, nearly always its memory limit
                how += (f"; most likely the sandbox's memory limit of {sandbox.spec.memory_mb} MB, the task's "
                        "[environment] memory_mb")
            answered = _answered(episode, relay)
            when = f"after {len(episode.steps)} turns" if episode.steps else (
                "during its first turn" if answered else "before its first turn")
            raise _crash(f"Codex {how} {when}" + await self._logs(sandbox), answered, trajectory)
        return trajectory

    async def _logs(self, sandbox: Sandbox) -> str:
        """The tail of Codex's stderr, for an error message."""
        n = self.options.log_tail_chars
        if n == 0:
            return ""
        try:
            stderr = await self.control.read(sandbox, "stderr.log")
        except SandboxError:
            return ""
        return f"\n--- codex stderr (tail) ---\n{stderr[-n:].strip()}" if stderr.strip() else ""

    def _trajectory(self, instruction: str, episode: Episode, profile: str, context: int) -> Trajectory:
        notes = [f"codex {self.options.version}, profile {profile} (context {context}), tools exec_command, write_stdin"]
        if self.world_note:
            notes.append(self.world_note)
        notes.extend(f"codex warning: {w}" for w in episode.warnings if w)
        if episode.unparsed_lines:
            notes.append(f"{episode.unparsed_lines} lines of Codex's output were not JSON events")
        return Trajectory(messages=episode.messages(instruction), final_answer=episode.final_answer,
                          stop_reason="completed", metrics=episode.metrics(), notes=notes)


def _endpoint_failed(episode: Episode, relay: ModelRelay) -> bool:
    """Codex gave up on a call the policy failed (a 5xx or no answer), not on one it answered with a 4xx."""
    status = episode.failure.status_code if episode.failure else None
    return relay.last_failure is not None and (status is None or status >= 500)


def _answered(episode: Episode, relay: ModelRelay) -> int:
    """Model replies that reached Codex (a reply's tool calls may run before Codex reports them)."""
    return max(len(episode.steps), relay.calls - relay.failures - relay.refused)


def _crash(message: str, answered: int, trajectory: Trajectory) -> CodexCrashError | CodexModelError:
    """A crash or a hang: ``infra`` (retried) before the model's first reply reached Codex; after it, the model's
    (reward 0, not retried): that reply's commands ran in the sandbox and may have sent the signal or stopped the
    process, and a retry would let an episode the agent was failing escape its grade."""
    if not answered:
        return CodexCrashError(message, trajectory)
    first, _, rest = message.partition("\n")
    return CodexModelError(f"{first}, after {answered} model repl{'y' if answered == 1 else 'ies'} whose tool calls "
                           "run in the sandbox: counted as the model's (reward 0, not retried), since an agent can "
                           "kill or stop its own harness" + (f"\n{rest}" if rest else ""), trajectory)
