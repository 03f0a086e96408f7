"""The ``gemini-cli`` harness: Google's Gemini CLI, headless, inside the sandbox.

Setup ships the pinned CLI bundle and a Node runtime from the host's npm install into the sandbox under
``sandbox_dir``. Run writes a ``settings.json`` (:mod:`tackroom_gemini_cli.settings`) whose only model is the trial's
policy, reached through a :class:`~tackroom_agent_kit.ModelRelay` (turn limit, failing endpoint, calls in flight) at
the gateway session's root: the CLI speaks the Gemini API (``streamGenerateContent?alt=sse``), which the gateway's
Gemini dialect records token for token. The CLI runs ``gemini --yolo --output-format json`` with the instruction on
its standard input, in its own session; the agent timeout, a hang and the turn limit stop every process it started.
"""

from __future__ import annotations

import json
import shlex
from typing import Any, Literal

from pydantic import Field

from tackroom import ConfigError, Harness, InfraError, Policy, Sandbox, Task, Trajectory
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
from tackroom_gemini_cli.errors import GeminiCliCrashError, GeminiCliModelError, GeminiCliTimeoutError
from tackroom_gemini_cli.install import DEFAULT_VERSION, GeminiCliInstall, ensure_installed
from tackroom_gemini_cli.sampling import fill_generation, generation_config
from tackroom_gemini_cli.settings import COMPACT_PROMPT, COMPACT_TOOLS, FULL_TOOLS, build_settings
from tackroom_worlds import mount_world_files, world_mount


class GeminiCliSetupError(InfraError):
    """The Gemini CLI could not be put into the sandbox or does not run there."""


class GeminiCliOptions(AgentOptions):
    """The ``[harness]`` section when ``name = "gemini-cli"`` (the options every agent harness has: AgentOptions)."""

    version: str = Field(default=DEFAULT_VERSION, description="The @google/gemini-cli release (installed from npm once)")
    profile: Literal["auto", "full", "compact"] = Field(
        default="auto",
        description="full: the CLI's own system prompt and local tools; compact: a short prompt and shell/read/write/"
        "replace, for small-context models; auto: compact when the model's context is below compact_below_context")
    compact_below_context: int = Field(default=32768, gt=0, description="auto picks compact below this context length")
    tools: list[str] | None = Field(default=None, description="Built-in tools to register (default: the profile's)")
    include_directories: list[str] = Field(
        default_factory=list,
        description="Directories beyond the working directory the CLI's file tools may read and write "
        "(--include-directories); a world task's files are added by themselves")
    sandbox_dir: str = Field(default="/opt/gemini-cli", description="Where the CLI, Node and its home live in the sandbox")
    max_tokens_per_turn: int | None = Field(
        default=None, gt=0,
        description="Output limit per turn unless the policy's sampling sets max_tokens (default: 4096 full, 512 compact)")


class GeminiCliHarness(Harness):
    """The Gemini CLI (@google/gemini-cli), the real agent, headless in the sandbox; its model calls go through the
    policy gateway's Gemini dialect."""

    name = "gemini-cli"
    Options = GeminiCliOptions
    capabilities = frozenset({"chat", "needs_policy", "agent_in_sandbox"})  # "chat": routed through the gateway
    options: GeminiCliOptions

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.install: GeminiCliInstall | None = None
        self.world_note: str | None = None
        self.include_directories: list[str] = list(self.options.include_directories)
        self.control = AgentControl(self.options.sandbox_dir, agent="the Gemini CLI")

    def _path(self, *parts: str) -> str:
        return "/".join([self.options.sandbox_dir.rstrip("/"), *parts])

    # -- setup -------------------------------------------------------------------------
    async def setup(self, sandbox: Sandbox, task: Task) -> None:
        self.world_note = await mount_world_files(sandbox, task)  # a world task's data, where its instruction says
        # The CLI's file tools refuse a path outside its workspace ("Path not in workspace"): a world's files are
        # outside it (/workspace beside /app), so they join it.
        mount = world_mount(task)
        self.include_directories = list(dict.fromkeys([*self.options.include_directories, *([mount] if mount else [])]))
        self.install = await ensure_installed(
            self.options.version,
            cache_dir=self.options.cache_path(),
            timeout=self.options.install_timeout_sec,
        )
        dirs = " ".join(shlex.quote(self._path(*p)) for p in [("bin",), ("run",), ("home", ".gemini"), ("cli",)])
        await must_succeed(sandbox, f"mkdir -p {dirs}", "create the Gemini CLI's directories", error=GeminiCliSetupError)
        await self.control.install(sandbox)
        await sandbox.upload(self.install.node, self._path("bin", "node"), timeout=300)
        await sandbox.upload(self.install.bundle, self._path("cli", "bundle"), timeout=300)
        await sandbox.write_file(self._path("cli", "package.json"),
                                 json.dumps({"name": "@google/gemini-cli", "version": self.options.version,
                                             "type": "module"}), timeout=60)
        node = shlex.quote(self._path("bin", "node"))
        await must_succeed(sandbox, f"chmod 755 {node}", "make Node executable", error=GeminiCliSetupError)
        await check_it_runs(sandbox, f"HOME={shlex.quote(self._path('home'))} {node} "
                            f"{shlex.quote(self._path('cli', 'bundle', 'gemini.js'))} --version",
                            agent="the Gemini CLI", version=self.options.version, shown="gemini --version",
                            reads_right=lambda out: out.strip() == self.options.version,
                            crash=GeminiCliCrashError, error=GeminiCliSetupError,
                            hint="Node needs a glibc userland (Debian, Ubuntu …)")

    # -- run ---------------------------------------------------------------------------
    async def run(self, task: Task, sandbox: Sandbox, policy: Policy | None) -> Trajectory:
        if policy is None:
            raise ConfigError("the gemini-cli harness calls a model: set [policy] base_url (e.g. `tackroom model up`)")
        if self.install is None:
            raise RuntimeError("GeminiCliHarness.run called before setup")
        deadline = self.options.deadline(task.config.agent.timeout_sec)
        context = await served_context_length(policy) or 32768
        profile = self.options.profile_for(context)
        tools = tuple(self.options.tools) if self.options.tools is not None else (
            COMPACT_TOOLS if profile == "compact" else FULL_TOOLS)
        prompt = self.options.prompt if self.options.prompt is not None else (
            COMPACT_PROMPT if profile == "compact" else None)
        settings = build_settings(tools=tools, max_turns=self.options.max_turns)
        await sandbox.write_file(self._path("home", ".gemini", "settings.json"), json.dumps(settings, indent=2),
                                 timeout=60)
        if prompt is not None:
            await sandbox.write_file(self._path("system.md"), prompt, timeout=60)
        wanted = self.options.max_tokens_per_turn or (512 if profile == "compact" else 4096)
        sampling = generation_config(policy.sampling, max(16, min(wanted, context // 4)))
        async with ModelRelay(policy.base_url, max_calls=self.options.max_turns, what="the Gemini CLI",
                              fill=self.options.relay_fill(fill_generation(sampling))) as relay:
            inside = await reach_relay(sandbox, relay, policy.base_url, "the Gemini CLI")
            await check_reachable(sandbox, inside, policy.base_url, "the Gemini CLI")
            try:
                ended = await run_watched(sandbox, self.control, relay, self.options, deadline, start=lambda: (
                    self._start(sandbox, task, policy, inside, prompt is not None)))
            except AgentControlError as exc:
                raise GeminiCliCrashError(str(exc)) from exc
        return await self._outcome(sandbox, task, policy, relay, ended, tools, profile, context)

    def _env(self, policy: Policy, root_url: str, own_prompt: bool) -> dict[str, str]:
        env = {
            "HOME": self._path("home"),
            "GEMINI_API_KEY": policy.api_key or "tackroom",
            "GOOGLE_GEMINI_BASE_URL": root_url,
            # The task's directory is not the user's: no trust dialog, no project settings prompt.
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
            "GEMINI_CLI_NO_RELAUNCH": "true",
            "NO_COLOR": "1",
            "NO_BROWSER": "1",
        }
        if own_prompt:
            env["GEMINI_SYSTEM_MD"] = self._path("system.md")
        env.update(self.options.env)
        return env

    async def _start(self, sandbox: Sandbox, task: Task, policy: Policy, root_url: str, own_prompt: bool) -> None:
        argv = [self._path("bin", "node"), self._path("cli", "bundle", "gemini.js"), "--yolo", "--output-format",
                "json", "--model", policy.model]
        if self.include_directories:
            argv += ["--include-directories", ",".join(self.include_directories)]
        # Headless: with stdin not a terminal and no --prompt, the CLI reads the instruction from it.
        await self.control.start(sandbox, argv, env=self._env(policy, root_url, own_prompt), stdin=task.instruction,
                                 prelude=f'export PATH={shlex.quote(self._path("bin"))}:"$PATH"; ')

    async def _outcome(self, sandbox: Sandbox, task: Task, policy: Policy, relay: ModelRelay, ended: Ending,
                       tools: tuple[str, ...], profile: str, context: int) -> Trajectory:
        """The trajectory, or the classified error carrying it."""
        stdout = await self.control.read(sandbox, "stdout.log")
        exit_code = (await self.control.read(sandbox, "exit_code")).strip()
        report = _report(stdout)
        trajectory = self._trajectory(task.instruction, report, tools, profile, context)
        if relay.limit_reached:
            trajectory.stop_reason = "max_turns"
            return trajectory
        if ended == "timeout":
            trajectory.stop_reason = "agent_timeout"
            raise GeminiCliTimeoutError(f"the Gemini CLI was still working at the agent timeout "
                                        f"({task.config.agent.timeout_sec:g}s) after {relay.calls} model calls; it "
                                        "was stopped", trajectory)
        if ended == "model_errors":
            trajectory.stop_reason = "endpoint_failing"
            raise GeminiCliCrashError(f"the model endpoint {policy.base_url} failed {relay.failures} calls (last: "
                                      f"{relay.last_failure}); the Gemini CLI was stopped" + await self._logs(sandbox),
                                      trajectory)
        error = report.get("error") if isinstance(report.get("error"), dict) else None
        if ended == "exited" and exit_code == "0" and error is None:
            return trajectory
        if ended == "exited" and _turn_limit(exit_code, error):
            # The CLI's own maxSessionTurns (= max_turns) stopped it before the relay had to: the same normal end,
            # and the episode is graded on what it did.
            trajectory.stop_reason = "max_turns"
            return trajectory
        how = (f"made no progress for {self.options.hang_timeout_sec:g}s and was stopped" if ended == "hang"
               else exit_described(exit_code, sandbox.spec.memory_mb))
        detail = f": {error.get('message')}" if error else ""
        trajectory.stop_reason = "hang" if ended == "hang" else "gemini_cli_error"
        raise crash_or_model(f"the Gemini CLI {how}{detail}" + await self._logs(sandbox), answered(relay), trajectory,
                             crash=GeminiCliCrashError, model=GeminiCliModelError)

    async def _logs(self, sandbox: Sandbox) -> str:
        """The tail of the CLI's stderr, for an error message."""
        return await self.control.tails(sandbox, self.options.log_tail_chars, "gemini")

    def _trajectory(self, instruction: str, report: dict[str, Any], tools: tuple[str, ...], profile: str,
                    context: int) -> Trajectory:
        answer = report.get("response") if isinstance(report.get("response"), str) else None
        stats = report.get("stats") if isinstance(report.get("stats"), dict) else {}
        tool_stats = stats.get("tools") if isinstance(stats.get("tools"), dict) else {}
        metrics = {k: float(tool_stats[v]) for k, v in (("tool_calls", "totalCalls"), ("tool_failures", "totalFail"))
                   if isinstance(tool_stats.get(v), int)}
        messages: list[dict[str, Any]] = [{"role": "user", "content": instruction}]
        if answer is not None:
            messages.append({"role": "assistant", "content": answer})
        notes = [f"gemini-cli {self.options.version}, profile {profile} (context {context}), tools {', '.join(tools)}; "
                 "the turns' exact tokens are the gateway session's", *([self.world_note] if self.world_note else [])]
        return Trajectory(messages=messages, final_answer=answer, stop_reason="completed", metrics=metrics, notes=notes)


TURN_LIMIT_EXIT = "53"
"""The CLI's exit status when ``maxSessionTurns`` is reached (``FatalTurnLimitedError``)."""


def _turn_limit(exit_code: str, error: dict[str, Any] | None) -> bool:
    """Whether the CLI stopped at its own turn limit (its exit status, or the error its JSON report names)."""
    return exit_code == TURN_LIMIT_EXIT or (error is not None and error.get("type") == "FatalTurnLimitedError")


def _report(stdout: str) -> dict[str, Any]:
    """The CLI's ``--output-format json`` report (``response``, ``stats`` or ``error``): the last JSON object on its
    standard output."""
    start = stdout.find("{")
    if start < 0:
        return {}
    try:
        doc = json.loads(stdout[start:])
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}
