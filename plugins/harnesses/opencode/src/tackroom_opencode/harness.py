"""The ``opencode`` harness: the real OpenCode agent, headless, inside the sandbox.

The pinned OpenCode binary and a static ripgrep are prepared once on the host
(:mod:`tackroom_opencode.install`) and bound read-only into the sandbox at
``bin_path`` (:meth:`OpenCodeHarness.mounts`), or uploaded into ``sandbox_dir``
by a sandbox that binds nothing — nothing is downloaded at trial time. Run
writes an ``opencode.json`` whose only provider is the trial's policy
(a gateway session, so the token trajectory is exact) reached through a
:class:`~tackroom_agent_kit.ModelRelay` (turn limit, failing endpoint, calls
in flight), starts ``opencode run --format json`` in its own session, watches
it, and turns its JSON events into the trajectory's messages and metrics. The
agent timeout, a hang and the turn limit stop every process OpenCode started.
"""

from __future__ import annotations

import functools
import re
import shlex
from pathlib import Path
from typing import Any

from pydantic import Field

from tackroom import ConfigError, Harness, InfraError, Policy, Sandbox, Task, Trajectory
from tackroom.sandbox_features import ReadOnlyMounts
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
from tackroom_opencode.config import (
    COMPACT_PROMPT,
    COMPACT_TOOLS,
    FULL_TOOLS,
    PROVIDER_ID,
    AgentSettings,
    McpServer,
    ModelSettings,
    build_config,
)
from tackroom_opencode.errors import (
    OpenCodeCrashError,
    OpenCodeModelError,
    OpenCodeTimeoutError,
)
from tackroom_opencode.events import Episode, parse_events
from tackroom_opencode.install import DEFAULT_VERSION, OpenCodeInstall, ensure_installed
from tackroom_worlds import mount_world_files

OPENCODE_MEMORY_MB = 512
"""What OpenCode (a Bun binary) needs at least: 256 MB kills it at start (exit 137), 512 MB runs a short episode."""
SAMPLING_FIELDS_OPENCODE_SETS = {"temperature", "top_p", "max_tokens", "max_completion_tokens"}


class OpenCodeSetupError(InfraError):
    """OpenCode could not be put into the sandbox or does not run there."""


class OpenCodeOptions(AgentOptions):
    """The ``[harness]`` section when ``name = "opencode"`` (the options every agent harness has: AgentOptions)."""

    version: str = Field(default=DEFAULT_VERSION, description="The opencode-ai release to run (installed from npm once)")
    tools: list[str] | None = Field(
        default=None,
        description="Tools to allow (default: the profile's); others are removed, except that write and edit share "
        "one OpenCode permission: either brings both")
    max_turns: int | None = Field(default=50, gt=0, description="Model calls per episode (OpenCode's step limit, enforced)")
    max_tokens_per_turn: int | None = Field(
        default=None, gt=0,
        description="Output limit per turn unless the policy's sampling sets max_tokens (default: 4096 full, 512 compact)")
    context_length: int | None = Field(default=None, gt=0, description="The model's context (default: asked from the policy's /models)")
    mcp_servers: dict[str, McpServer] = Field(default_factory=dict, description="MCP servers to give OpenCode (none by default)")
    sandbox_dir: str = Field(default="/opt/opencode", description="Where OpenCode's config, state and run files live in the sandbox")
    bin_path: str = Field(
        default="/mnt/tackroom-opencode",
        description="Where the sandbox binds the host's prepared opencode and rg read-only (a sandbox that binds "
        "nothing gets them uploaded into sandbox_dir/bin)")
    hang_timeout_sec: float = Field(
        default=900.0, gt=0,
        description="No output and no model call in flight for this long is a hang (infra error); OpenCode's bash "
        "tool stops a command after at most 10 minutes, so nothing it does legitimately is silent for longer")
    max_model_errors: int = Field(
        default=3, ge=1,
        description="Failed model calls (OpenCode retries them for a minute) after which the endpoint counts as down (infra)")
    log_tail_chars: int = Field(default=1500, ge=0, description="How much of OpenCode's stderr and log an error message carries")


class OpenCodeHarness(Harness):
    """OpenCode (opencode-ai), the real agent, headless in the sandbox; its model calls go through the policy gateway."""

    name = "opencode"
    Options = OpenCodeOptions
    capabilities = frozenset({"chat", "needs_policy", "agent_in_sandbox"})
    options: OpenCodeOptions

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.install: OpenCodeInstall | None = None
        self.world_note: str | None = None
        self.bin_dir = self._path("bin")
        """Where opencode and rg are in the sandbox: ``bin_path`` when bound, else ``sandbox_dir/bin``."""
        self.control = AgentControl(self.options.sandbox_dir, agent="OpenCode", log_glob="xdg/data/opencode/log/*.log")

    # -- paths inside the sandbox ------------------------------------------------------
    def _path(self, *parts: str) -> str:
        return "/".join([self.options.sandbox_dir.rstrip("/"), *parts])

    # -- setup -------------------------------------------------------------------------
    async def _installed(self) -> OpenCodeInstall:
        if self.install is None:
            self.install = await ensure_installed(
                self.options.version,
                cache_dir=self.options.cache_path(),
                timeout=self.options.install_timeout_sec,
            )
        return self.install

    async def mounts(self, task: Task) -> dict[str, Path]:
        """The host's prepared opencode and rg (made once per version, never written again), bound read-only at
        ``bin_path``: nothing is copied per trial."""
        return {self.options.bin_path: (await self._installed()).shipped}

    async def setup(self, sandbox: Sandbox, task: Task) -> None:
        self.world_note = await mount_world_files(sandbox, task)  # a world task's data, where its instruction says
        install = await self._installed()
        at = sandbox.spec.mounts.get(self.options.bin_path) if isinstance(sandbox, ReadOnlyMounts) else None
        bound = at is not None and at.resolve() == install.shipped.resolve()
        self.bin_dir = self.options.bin_path.rstrip("/") if bound else self._path("bin")
        dirs = " ".join(shlex.quote(self._path(*p)) for p in [
            ("run",), ("xdg", "config", "opencode", "node_modules"), ("xdg", "data"), ("xdg", "cache"),
            ("xdg", "state"), *([] if bound else [("bin",)])])
        await must_succeed(sandbox, f"mkdir -p {dirs}", "create OpenCode's directories", error=OpenCodeSetupError)
        await self._seed_config_dir(sandbox)
        await self.control.install(sandbox)
        binary = shlex.quote(f"{self.bin_dir}/opencode")
        if not bound:
            for name, timeout in (("opencode", 300), ("rg", 60)):
                await sandbox.upload(install.shipped / name, f"{self.bin_dir}/{name}", timeout=timeout)
            await must_succeed(sandbox, f"chmod 755 {binary} {shlex.quote(f'{self.bin_dir}/rg')}",
                               "make OpenCode executable", error=OpenCodeSetupError)
        # The build was checked once on the host (`opencode --version`, which loads all of OpenCode's JavaScript: a
        # second of CPU). Here only whether this sandbox runs the binary at all: as plain Bun (BUN_BE_BUN), the same
        # executable, loader, libraries and Bun runtime start without OpenCode's code, in milliseconds.
        await check_it_runs(sandbox, f"HOME=/tmp BUN_BE_BUN=1 {binary} --version", agent="OpenCode",
                            version=self.options.version, reads_right=_a_version, shown="BUN_BE_BUN=1 opencode --version",
                            crash=OpenCodeCrashError, error=OpenCodeSetupError,
                            hint="The binary needs a glibc userland (Debian, Ubuntu …); for musl images (Alpine) no "
                            "build is shipped yet")

    async def _seed_config_dir(self, sandbox: Sandbox) -> None:
        """Mark OpenCode's config dir as already holding its plugin SDK, so it does not npm-install it.

        At start OpenCode installs ``@opencode-ai/plugin`` into each config
        directory in the background unless ``node_modules`` exists and the lock
        lists every dependency of ``package.json``. Custom plugins are not used
        here, so an empty install that says it is complete is the truth.
        """
        deps = {"@opencode-ai/plugin": self.options.version}
        config_dir = ("xdg", "config", "opencode")
        await sandbox.write_file(self._path(*config_dir, "package.json"), _json({"dependencies": deps}), timeout=60)
        await sandbox.write_file(self._path(*config_dir, "package-lock.json"),
                                 _json({"lockfileVersion": 3, "packages": {"": {"dependencies": deps}}}), timeout=60)

    # -- run ---------------------------------------------------------------------------
    async def run(self, task: Task, sandbox: Sandbox, policy: Policy | None) -> Trajectory:
        if policy is None:
            raise ConfigError("the opencode harness calls a model: set [policy] base_url (e.g. `tackroom model up`)")
        if self.install is None:
            raise RuntimeError("OpenCodeHarness.run called before setup")
        deadline = self.options.deadline(task.config.agent.timeout_sec)
        context = self.options.context_length or await served_context_length(policy) or 32768
        profile = self.options.profile_for(context)
        async with ModelRelay(policy.base_url, max_calls=self.options.max_turns, what="OpenCode",
                              fill=self.options.relay_fill()) as relay:
            inside = await reach_relay(sandbox, relay, policy.base_url, "OpenCode")
            model, agent = self._settings(policy, f"{inside}/v1", context, profile)
            await sandbox.write_file(self._path("opencode.json"), _json(build_config(model, agent)), timeout=60)
            await check_reachable(sandbox, inside, policy.base_url, "OpenCode")
            try:
                ended = await run_watched(sandbox, self.control, relay, self.options, deadline,
                                          start=lambda: self._start(sandbox, task, policy))
            except AgentControlError as exc:
                raise OpenCodeCrashError(str(exc)) from exc
        return await self._outcome(sandbox, task, policy, relay, ended, agent, profile, context)

    async def _outcome(self, sandbox: Sandbox, task: Task, policy: Policy, relay: ModelRelay, ended: Ending,
                       agent: AgentSettings, profile: str, context: int) -> Trajectory:
        """The trajectory, or the classified error carrying it."""
        episode = parse_events(await self.control.read(sandbox, "stdout.log"))
        trajectory = self._trajectory(task.instruction, episode, agent, profile, context)
        exit_code = (await self.control.read(sandbox, "exit_code")).strip()
        if relay.limit_reached:
            # The relay refused the call after the last allowed turn (OpenCode may have exited on that refusal
            # before the watch loop saw it); the episode ends there, like any turn limit.
            trajectory.stop_reason = "max_turns"
            return trajectory
        if ended == "timeout":
            trajectory.stop_reason = "agent_timeout"
            raise OpenCodeTimeoutError(
                f"OpenCode was still working at the agent timeout ({task.config.agent.timeout_sec:g}s) "
                f"after {len(episode.steps)} turns; it was stopped", trajectory)
        if ended == "hang":
            trajectory.stop_reason = "hang"
            raise _crash(f"OpenCode made no progress for {self.options.hang_timeout_sec:g}s and was stopped"
                         + await self._logs(sandbox), answered(relay, len(episode.steps)), trajectory)
        if ended == "model_errors":
            trajectory.stop_reason = "endpoint_failing"
            raise OpenCodeCrashError(
                f"the model endpoint {policy.base_url} failed {relay.failures} calls (last: {relay.last_failure}); "
                "OpenCode was stopped instead of retrying for another minute" + await self._logs(sandbox), trajectory)
        if episode.failure is not None:
            failure = episode.failure
            if failure.context_exhausted:
                trajectory.stop_reason = "context_exhausted"
                raise OpenCodeModelError(f"the conversation outgrew the model's context ({context} tokens): "
                                         f"{failure.message}", trajectory)
            trajectory.stop_reason = "model_error" if _rejected(failure.status_code) else "opencode_error"
            message = f"OpenCode stopped on {failure.name}: {failure.message}"
            if _rejected(failure.status_code):
                raise OpenCodeModelError(message, trajectory)
            raise OpenCodeCrashError(message + await self._logs(sandbox), trajectory)
        if ended == "died" or exit_code != "0":
            trajectory.stop_reason = "opencode_crashed"
            how = exit_described(exit_code, sandbox.spec.memory_mb, needs_mb=OPENCODE_MEMORY_MB, agent="OpenCode")
            when = f"after {len(episode.steps)} turns" if episode.steps else "before its first turn"
            raise _crash(f"OpenCode {how} {when}" + await self._logs(sandbox), answered(relay, len(episode.steps)),
                         trajectory)
        return trajectory

    def _settings(self, policy: Policy, base_url: str, context: int, profile: str) -> tuple[ModelSettings, AgentSettings]:
        sampling = dict(policy.sampling)
        wanted = (sampling.get("max_tokens") or sampling.get("max_completion_tokens") or self.options.max_tokens_per_turn
                  or (512 if profile == "compact" else 4096))
        model = ModelSettings(
            base_url=base_url,
            model=policy.model,
            api_key=policy.api_key,
            context_length=context,
            max_output_tokens=max(16, min(int(wanted), context // 4)),
            temperature=sampling.get("temperature"),
            top_p=sampling.get("top_p"),
            extra_body={k: v for k, v in sampling.items() if k not in SAMPLING_FIELDS_OPENCODE_SETS},
        )
        tools = tuple(self.options.tools) if self.options.tools is not None else (
            COMPACT_TOOLS if profile == "compact" else FULL_TOOLS)
        prompt = self.options.prompt if self.options.prompt is not None else (
            COMPACT_PROMPT if profile == "compact" else None)
        steps = self.options.max_turns
        if steps is not None and self.options.tool_choice == "required":
            # On its last allowed step OpenCode tells the model "MAXIMUM STEPS REACHED … respond with text only",
            # which contradicts a call that must be a tool call: OpenCode gets one step more, and the relay ends
            # the episode at max_turns (stop_reason max_turns, as OpenCode's own limit would).
            steps += 1
        agent = AgentSettings(tools=tools, prompt=prompt, max_steps=steps, mcp_servers=self.options.mcp_servers)
        return model, agent

    def _env(self) -> dict[str, str]:
        xdg = self._path("xdg")
        env = {
            "OPENCODE_CONFIG": self._path("opencode.json"),
            "XDG_CONFIG_HOME": f"{xdg}/config",
            "XDG_DATA_HOME": f"{xdg}/data",
            "XDG_CACHE_HOME": f"{xdg}/cache",
            "XDG_STATE_HOME": f"{xdg}/state",
            # Nothing from the task's files may change the harness's config, and nothing is fetched.
            "OPENCODE_DISABLE_PROJECT_CONFIG": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
            "OPENCODE_DISABLE_CLAUDE_CODE": "1",
            "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
            "OPENCODE_DISABLE_SHARE": "1",
            "OPENCODE_DISABLE_AUTOCOMPACT": "1",
            "OPENCODE_DISABLE_PRUNE": "1",
            "npm_config_offline": "true",
        }
        env.update(self.options.env)
        return env

    async def _start(self, sandbox: Sandbox, task: Task, policy: Policy) -> None:
        argv = [f"{self.bin_dir}/opencode", "run", "--format", "json", "--title", "tackroom trial",
                "--model", f"{PROVIDER_ID}/{policy.model}"]
        # OpenCode reads the message verbatim from its standard input.
        await self.control.start(sandbox, argv, env=self._env(), stdin=task.instruction,
                                 prelude=f'export PATH={shlex.quote(self.bin_dir)}:"$PATH"; ')

    async def _logs(self, sandbox: Sandbox) -> str:
        """The tails of OpenCode's stderr and of its own log, for an error message."""
        return await self.control.tails(sandbox, self.options.log_tail_chars, "opencode")

    def _trajectory(self, instruction: str, episode: Episode, agent: AgentSettings, profile: str,
                    context: int) -> Trajectory:
        metrics = episode.metrics()
        stop = "completed"
        if agent.max_steps is not None and len(episode.steps) >= agent.max_steps:
            stop = "max_turns"
        elif episode.steps and episode.steps[-1].finish_reason == "length":
            stop = "max_tokens"
        notes = [f"opencode {self.options.version}, profile {profile} (context {context}), tools {', '.join(agent.tools)}"]
        if self.world_note:
            notes.append(self.world_note)
        if episode.unparsed_lines:
            notes.append(f"{episode.unparsed_lines} lines of OpenCode's output were not JSON events")
        return Trajectory(messages=episode.messages(instruction), final_answer=episode.final_answer,
                          stop_reason=stop, metrics=metrics, notes=notes)


def _a_version(out: str) -> bool:
    """``x.y.z`` (Bun's version; OpenCode's own from a build without BUN_BE_BUN, or a stand-in)."""
    return re.fullmatch(r"\d+\.\d+\.\d+\S*", out.strip()) is not None


def _rejected(status: int | None) -> bool:
    """A 4xx other than timeouts and rate limits: the endpoint refused this conversation."""
    return status is not None and 400 <= status < 500 and status not in (408, 429)


def _json(doc: dict[str, Any]) -> str:
    import json

    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


_crash = functools.partial(crash_or_model, crash=OpenCodeCrashError, model=OpenCodeModelError)
"""A crash or a hang: infra before the model's first reply reached OpenCode, the model's after it."""
