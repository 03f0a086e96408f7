"""The ``claude-code`` harness: Anthropic's Claude Code CLI, the real agent, headless inside the sandbox.

Setup ships the pinned native ``claude`` binary from the host's install into the sandbox under ``sandbox_dir`` (nothing
is downloaded at trial time) with a config dir whose onboarding is already done. Run points Claude Code at a
:class:`~tackroom_agent_kit.ModelRelay` in front of the trial's gateway session (Anthropic Messages dialect, so the
token trajectory is exact), starts ``claude -p --output-format stream-json`` in its own session with the
instruction on stdin, watches it, and turns its events into the trajectory's messages and metrics. The agent
timeout, a hang, the turn limit and a failing endpoint stop every process Claude Code started.
"""

from __future__ import annotations

import functools
import shlex
from typing import Any, Literal

from pydantic import Field

from tackroom import ConfigError, Harness, Policy, Sandbox, Task, Trajectory
from tackroom_agent_kit import (
    AgentControl,
    AgentControlError,
    AgentOptions,
    Ending,
    ModelRelay,
    answered,
    check_it_runs,
    check_reachable,
    crash_or_model,
    exit_described,
    must_succeed,
    reach_relay,
    run_watched,
    served_context_length,
)
from tackroom_claude_code import config
from tackroom_claude_code.config import COMPACT_PROMPT, COMPACT_TOOLS, FULL_TOOLS, McpServer, RunSettings
from tackroom_claude_code.errors import (
    ClaudeCodeCrashError,
    ClaudeCodeModelError,
    ClaudeCodeSetupError,
    ClaudeCodeTimeoutError,
)
from tackroom_claude_code.events import Episode, parse_events
from tackroom_claude_code.install import DEFAULT_VERSION, ClaudeCodeInstall, ensure_installed, reported_version
from tackroom_worlds import mount_world_files

AGENT = "Claude Code"
CLAUDE_MEMORY_MB = 512
"""What Claude Code (a Bun binary) needs at least for a short episode."""


class ClaudeCodeOptions(AgentOptions):
    """The ``[harness]`` section when ``name = "claude-code"`` (the options every agent harness has: AgentOptions)."""

    version: str = Field(default=DEFAULT_VERSION, description="The @anthropic-ai/claude-code release to run (installed from npm once)")
    profile: Literal["auto", "full", "compact"] = Field(
        default="auto",
        description="full: Claude Code's own system prompt and its file/shell tools; compact: a short prompt and "
        "Bash/Read/Write/Edit, for small-context models; auto: compact when the model's context is below "
        "compact_below_context",
    )
    compact_below_context: int = Field(default=32768, gt=0, description="auto picks compact below this context length")
    tools: list[str] | None = Field(default=None, description="Built-in tools to offer (default: the profile's), e.g. [\"Bash\", \"Read\"]")
    prompt: str | None = Field(default=None, description="System prompt replacing the profile's (--system-prompt)")
    append_prompt: str | None = Field(default=None, description="Text appended to the system prompt (--append-system-prompt)")
    max_turns: int | None = Field(default=50, gt=0, description="Model calls per episode (Claude Code's --max-turns, enforced by the relay too)")
    max_tokens_per_turn: int | None = Field(
        default=None, gt=0,
        description="Output limit per turn unless the policy's sampling sets max_tokens (default: 4096 full, 512 compact)")
    thinking_tokens: int = Field(default=0, ge=0, description="Extended thinking budget (MAX_THINKING_TOKENS); 0 turns it off")
    context_length: int | None = Field(default=None, gt=0, description="The model's context (default: asked from the policy's /models)")
    mcp_servers: dict[str, McpServer] = Field(default_factory=dict, description="MCP servers to give Claude Code (none by default)")
    sandbox_dir: str = Field(default="/opt/claude-code", description="Where Claude Code, its config and state live in the sandbox")
    hang_timeout_sec: float = Field(
        default=900.0, gt=0,
        description="No output and no model call in flight for this long is a hang; Claude Code's Bash tool stops a "
        "command after at most 10 minutes, so nothing it does legitimately is silent for longer")
    max_model_errors: int = Field(
        default=3, ge=1,
        description="Failed model calls after which the endpoint counts as down (infra); Claude Code retries this often")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for Claude Code (wins over the harness's)")


class ClaudeCodeHarness(Harness):
    """Claude Code (@anthropic-ai/claude-code), the real agent, headless in the sandbox; its model calls go through
    the policy gateway's Anthropic Messages dialect."""

    name = "claude-code"
    Options = ClaudeCodeOptions
    capabilities = frozenset({"chat", "needs_policy", "agent_in_sandbox"})
    options: ClaudeCodeOptions

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.install: ClaudeCodeInstall | None = None
        self.world_note: str | None = None
        self.control = AgentControl(self.options.sandbox_dir, agent=AGENT)

    def _path(self, *parts: str) -> str:
        return "/".join([self.options.sandbox_dir.rstrip("/"), *parts])

    # -- setup -------------------------------------------------------------------------
    async def setup(self, sandbox: Sandbox, task: Task) -> None:
        self.world_note = await mount_world_files(sandbox, task)  # a world task's data, where its instruction says
        self.install = await ensure_installed(
            self.options.version,
            cache_dir=self.options.cache_path(),
            timeout=self.options.install_timeout_sec,
        )
        dirs = " ".join(shlex.quote(self._path(*p)) for p in [("bin",), ("run",), ("config",)])
        await must_succeed(sandbox, f"mkdir -p {dirs}", "create Claude Code's directories", error=ClaudeCodeSetupError)
        await sandbox.write_file(self._path("config", ".claude.json"), config.dump(config.seeded_state()), timeout=60)
        await self.control.install(sandbox)
        binary = self._path("bin", "claude")
        await sandbox.upload(self.install.binary, binary, timeout=300)
        await must_succeed(sandbox, f"chmod 755 {shlex.quote(binary)}", "make Claude Code executable", error=ClaudeCodeSetupError)
        await check_it_runs(sandbox, f"HOME=/tmp {shlex.quote(binary)} --version", agent=AGENT,
                            version=self.options.version, shown="claude --version",
                            reads_right=lambda out: reported_version(out) == self.options.version,
                            crash=ClaudeCodeCrashError, error=ClaudeCodeSetupError,
                            hint="The binary needs a glibc userland (Debian, Ubuntu …); for musl images (Alpine) no "
                            "build is shipped yet")

    # -- run ---------------------------------------------------------------------------
    async def run(self, task: Task, sandbox: Sandbox, policy: Policy | None) -> Trajectory:
        if policy is None:
            raise ConfigError("the claude-code harness calls a model: set [policy] base_url (e.g. `tackroom model up`)")
        if self.install is None:
            raise RuntimeError("ClaudeCodeHarness.run called before setup")
        deadline = self.options.deadline(task.config.agent.timeout_sec)
        context = self.options.context_length or await served_context_length(policy) or 200_000
        profile = self.options.profile_for(context)
        async with ModelRelay(policy.base_url, max_calls=self.options.max_turns, what=AGENT,
                              fill=self.options.relay_fill()) as relay:
            inside = await reach_relay(sandbox, relay, policy.base_url, AGENT)
            run = self._settings(policy, inside, context, profile)
            await sandbox.write_file(run.settings_path, config.dump(config.settings(run)), timeout=60)
            if run.mcp_servers:
                await sandbox.write_file(run.mcp_path, config.dump(config.mcp_config(run)), timeout=60)
            await check_reachable(sandbox, inside, policy.base_url, AGENT)
            try:
                ended = await run_watched(sandbox, self.control, relay, self.options, deadline, start=lambda: (
                    self.control.start(sandbox, config.argv(run), env=config.environment(run), stdin=task.instruction)))
            except AgentControlError as exc:
                raise ClaudeCodeCrashError(str(exc)) from exc
        return await self._outcome(sandbox, task, policy, relay, ended, run, profile, context)

    def _settings(self, policy: Policy, base_url: str, context: int, profile: str) -> RunSettings:
        sampling = dict(policy.sampling)
        wanted = (sampling.get("max_tokens") or sampling.get("max_completion_tokens") or self.options.max_tokens_per_turn
                  or (512 if profile == "compact" else 4096))
        tools = tuple(self.options.tools) if self.options.tools is not None else (
            COMPACT_TOOLS if profile == "compact" else FULL_TOOLS)
        prompt = self.options.prompt if self.options.prompt is not None else (
            COMPACT_PROMPT if profile == "compact" else None)
        return RunSettings(
            binary=self._path("bin", "claude"), root=self.options.sandbox_dir.rstrip("/"), base_url=base_url,
            model=policy.model,
            # Claude Code sends it as x-api-key; the session's token is in the URL, and an empty key is refused.
            api_key=policy.api_key if policy.api_key and policy.api_key != "EMPTY" else "tackroom",
            tools=tools, prompt=prompt, append_prompt=self.options.append_prompt, max_turns=self.options.max_turns,
            max_output_tokens=max(16, min(int(wanted), context // 4)), thinking_tokens=self.options.thinking_tokens,
            mcp_servers=self.options.mcp_servers,
            # Claude Code retries a failing call itself; as often as the harness tolerates failures, so the relay
            # sees the endpoint fail max_model_errors times before Claude Code gives up on its own.
            extra_env={"CLAUDE_CODE_MAX_RETRIES": str(self.options.max_model_errors), **self.options.env},
        )

    async def _outcome(self, sandbox: Sandbox, task: Task, policy: Policy, relay: ModelRelay, ended: Ending,
                       run: RunSettings, profile: str, context: int) -> Trajectory:
        """The trajectory, or the classified error carrying it."""
        episode = parse_events(await self.control.read(sandbox, "stdout.log"))
        trajectory = self._trajectory(task.instruction, episode, run, profile, context)
        exit_code = (await self.control.read(sandbox, "exit_code")).strip()
        result = episode.result
        if relay.limit_reached or (result is not None and result.max_turns):
            # Claude Code's own --max-turns, or the relay's refusal past it: the episode ends there.
            trajectory.stop_reason = "max_turns"
            return trajectory
        if ended == "timeout":
            trajectory.stop_reason = "agent_timeout"
            raise ClaudeCodeTimeoutError(
                f"Claude Code was still working at the agent timeout ({task.config.agent.timeout_sec:g}s) "
                f"after {len(episode.steps)} turns; it was stopped", trajectory)
        if ended == "hang":
            trajectory.stop_reason = "hang"
            raise _crash(f"Claude Code made no progress for {self.options.hang_timeout_sec:g}s and was stopped"
                         + await self._logs(sandbox), answered(relay, len(episode.steps)), trajectory)
        if ended == "model_errors":
            trajectory.stop_reason = "endpoint_failing"
            raise ClaudeCodeCrashError(
                f"the model endpoint {policy.base_url} failed {relay.failures} calls (last: {relay.last_failure}); "
                "Claude Code was stopped instead of retrying" + await self._logs(sandbox), trajectory)
        if result is not None and result.is_error:
            if result.context_exhausted:
                trajectory.stop_reason = "context_exhausted"
                raise ClaudeCodeModelError(f"the conversation outgrew the model's context ({context} tokens): "
                                           f"{result.message}", trajectory)
            if _rejected(result.api_error_status):
                trajectory.stop_reason = "model_error"
                raise ClaudeCodeModelError(f"the endpoint rejected a request (HTTP {result.api_error_status}): "
                                           f"{result.message}", trajectory)
            if result.api_error_status is not None or result.terminal_reason == "api_error":
                trajectory.stop_reason = "endpoint_failing"
                raise ClaudeCodeCrashError(
                    f"the model endpoint {policy.base_url} failed (HTTP {result.api_error_status}, "
                    f"{relay.failures} failed calls): {result.message}" + await self._logs(sandbox), trajectory)
            trajectory.stop_reason = "claude_error"
            raise _crash(f"Claude Code ended on an error ({result.subtype}): {result.message}"
                         + await self._logs(sandbox), answered(relay, len(episode.steps)), trajectory)
        if result is None and (ended == "died" or exit_code != "0"):
            trajectory.stop_reason = "claude_crashed"
            how = exit_described(exit_code, sandbox.spec.memory_mb, needs_mb=CLAUDE_MEMORY_MB, agent=AGENT)
            when = f"after {len(episode.steps)} turns" if episode.steps else "before its first turn"
            raise _crash(f"Claude Code {how} {when}" + await self._logs(sandbox), answered(relay, len(episode.steps)), trajectory)
        return trajectory

    async def _logs(self, sandbox: Sandbox) -> str:
        """The tail of Claude Code's stderr, for an error message."""
        return await self.control.tails(sandbox, self.options.log_tail_chars, "claude")

    def _trajectory(self, instruction: str, episode: Episode, run: RunSettings, profile: str,
                    context: int) -> Trajectory:
        stop = "completed"
        if episode.result is not None and episode.result.stop_reason == "max_tokens":
            stop = "max_tokens"
        notes = [f"claude-code {self.options.version}, profile {profile} (context {context}), "
                 f"tools {', '.join(episode.tools or run.tools)}"]
        if self.world_note:
            notes.append(self.world_note)
        if episode.unparsed_lines:
            notes.append(f"{episode.unparsed_lines} lines of Claude Code's output were not JSON events")
        if episode.subagent_events:
            notes.append(f"{episode.subagent_events} events of sub-agents were left out of the transcript")
        notes.extend(f"Claude Code said: {n[:300]}" for n in episode.notices if n.strip())
        return Trajectory(messages=episode.messages(instruction), final_answer=episode.final_answer,
                          stop_reason=stop, metrics=episode.metrics(), notes=notes)


def _rejected(status: int | None) -> bool:
    """A 4xx other than timeouts and rate limits: the endpoint refused this conversation."""
    return status is not None and 400 <= status < 500 and status not in (408, 429)


_crash = functools.partial(crash_or_model, crash=ClaudeCodeCrashError, model=ClaudeCodeModelError)
"""A crash or a hang: infra before the model's first reply reached Claude Code, the model's after it."""
