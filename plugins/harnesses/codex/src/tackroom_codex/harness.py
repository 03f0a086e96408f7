"""The ``codex`` harness: OpenAI's Codex CLI, the real agent, headless inside the sandbox.

Setup ships the pinned static ``codex`` binary (and its ``rg``) from the host's install into the sandbox under
``sandbox_dir``: nothing is downloaded at trial time. Run writes ``config.toml`` into ``CODEX_HOME`` (one provider,
the trial's policy over OpenAI Responses, reached through a :class:`~tackroom_agent_kit.ModelRelay` that counts calls,
enforces the turn limit and fills in the policy's sampling), starts ``codex exec --json`` in its own session,
watches it, and turns its JSONL events into the trajectory's messages and metrics. The agent timeout, a hang and the
turn limit stop every process Codex started.
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
from tackroom_codex.sampling import fill_responses, responses_sampling
from tackroom_worlds import mount_world_files

AGENT = "Codex"


class CodexOptions(AgentOptions):
    """The ``[harness]`` section when ``name = "codex"`` (the options every agent harness has: AgentOptions)."""

    version: str = Field(default=DEFAULT_VERSION, description="The @openai/codex release to run (installed from npm once)")
    profile: Literal["auto", "full", "compact"] = Field(
        default="auto",
        description="full: Codex's own system prompt (~4k tokens); compact: a short prompt and no AGENTS.md, for "
        "small-context models; auto: compact when the model's context is below compact_below_context")
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
    model_retries: int = Field(default=1, ge=0, description="Codex's own retries of a failed model request or stream")


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
            cache_dir=self.options.cache_path(),
            timeout=self.options.install_timeout_sec,
        )
        dirs = " ".join(shlex.quote(self._path(p)) for p in ("bin", "run", "home"))
        await must_succeed(sandbox, f"mkdir -p {dirs}", "create Codex's directories", error=CodexSetupError)
        await self.control.install(sandbox)
        await sandbox.upload(self.install.binary, self._path("bin", "codex"), timeout=300)
        await sandbox.upload(self.install.ripgrep, self._path("bin", "rg"), timeout=60)
        binary = shlex.quote(self._path("bin", "codex"))
        await must_succeed(sandbox, f"chmod 755 {binary} {shlex.quote(self._path('bin', 'rg'))}",
                         "make Codex executable", error=CodexSetupError)
        home = shlex.quote(self._path("home"))
        await check_it_runs(sandbox, f"CODEX_HOME={home} {binary} --version", agent=AGENT, version=self.options.version,
                            reads_right=lambda out: out.strip() == f"codex-cli {self.options.version}",
                            shown="codex --version", crash=CodexCrashError, error=CodexSetupError)

    # -- run ---------------------------------------------------------------------------
    async def run(self, task: Task, sandbox: Sandbox, policy: Policy | None) -> Trajectory:
        if policy is None:
            raise ConfigError("the codex harness calls a model: set [policy] base_url (e.g. `tackroom model up`)")
        if self.install is None:
            raise RuntimeError("CodexHarness.run called before setup")
        deadline = self.options.deadline(task.config.agent.timeout_sec)
        context = self.options.context_length or await served_context_length(policy) or 32768
        profile = self.options.profile_for(context)
        sampling = responses_sampling(policy.sampling, self._max_output(profile, context))
        async with ModelRelay(policy.base_url, max_calls=self.options.max_turns, what=AGENT,
                              fill=self.options.relay_fill(fill_responses(sampling))) as relay:
            inside = await reach_relay(sandbox, relay, policy.base_url, AGENT)
            settings = self._settings(policy, f"{inside}/v1", context, profile)
            await sandbox.write_file(self._path("home", "config.toml"), to_toml(build_config(settings)), timeout=60)
            if uses_catalog(settings):
                await sandbox.write_file(self._path("home", "catalog.json"), catalog_json(settings), timeout=60)
            await check_reachable(sandbox, inside, policy.base_url, AGENT)
            try:
                ended = await run_watched(sandbox, self.control, relay, self.options, deadline,
                                          start=lambda: self._start(sandbox, task, policy))
            except AgentControlError as exc:
                raise CodexCrashError(str(exc)) from exc
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

    async def _start(self, sandbox: Sandbox, task: Task, policy: Policy) -> None:
        argv = [self._path("bin", "codex"), "exec", "--json", "--strict-config", "--skip-git-repo-check",
                "--color", "never", "-"]
        prelude = f'export PATH={shlex.quote(self._path("bin"))}:"$PATH"; '
        await self.control.start(sandbox, argv, env=self._env(policy), stdin=task.instruction, prelude=prelude)

    async def _outcome(self, sandbox: Sandbox, task: Task, policy: Policy, relay: ModelRelay, ended: Ending,
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
                         + await self._logs(sandbox), answered(relay, len(episode.steps)), trajectory)
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
                         answered(relay, len(episode.steps)), trajectory)
        if ended == "died" or exit_code != "0":
            trajectory.stop_reason = "codex_crashed"
            how = exit_described(exit_code, sandbox.spec.memory_mb)
            replies = answered(relay, len(episode.steps))
            when = f"after {len(episode.steps)} turns" if episode.steps else (
                "during its first turn" if replies else "before its first turn")
            raise _crash(f"Codex {how} {when}" + await self._logs(sandbox), replies, trajectory)
        return trajectory

    async def _logs(self, sandbox: Sandbox) -> str:
        """The tail of Codex's stderr, for an error message."""
        return await self.control.tails(sandbox, self.options.log_tail_chars, "codex")

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


_crash = functools.partial(crash_or_model, crash=CodexCrashError, model=CodexModelError)
"""A crash or a hang: infra before the model's first reply reached Codex, the model's after it."""
