"""The ``terminus`` harness: the model types into a tmux terminal, one JSON turn at a time."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any, Literal

from pydantic import Field

import tackroom_terminus.prompts as prompts
from tackroom import (
    ConfigError,
    Harness,
    ModelError,
    PluginOptions,
    Policy,
    Sandbox,
    SandboxError,
    TackroomError,
    Task,
    Trajectory,
)
from tackroom_terminus.chat_client import ChatClient, ChatReply, ContextExhaustedError
from tackroom_terminus.protocol import parse_reply, reply_schema, response_format
from tackroom_terminus.spec import TERMINUS
from tackroom_terminus.tmux import Observation, TmuxSession
from tackroom_terminus.tmux_install import ensure_tmux
from tackroom_worlds import mount_world_files


class TerminusOptions(PluginOptions):
    """``[harness]`` options of ``terminus``."""

    max_turns: int = Field(default=50, ge=1, description="Model calls per episode (invalid answers count)")
    max_tokens: int = Field(default=1024, ge=16, description="Completion tokens per turn")
    temperature: float | None = Field(default=None, ge=0, description="Overrides [policy] sampling's temperature")
    context_limit_tokens: int | None = Field(
        default=None, ge=256, description="Context budget; default: the endpoint's max_model_len (GET /models)")
    chars_per_token: float = Field(
        default=3.0, gt=0, description="For estimating the tokens of a new message before sending it")
    max_parse_retries: int = Field(
        default=3, ge=0, description="Invalid answers in a row the model is asked to fix before the episode ends")
    max_command_duration_sec: float = Field(default=60.0, gt=0, le=600, description="Cap on a command's wait")
    structured_outputs: bool = Field(
        default=False, description="Send the turn's JSON schema as response_format so the engine enforces it")
    structured_max_chars: int | None = Field(
        default=None, ge=8, description="maxLength of analysis, plan and keystrokes in the enforced schema")
    structured_max_commands: int | None = Field(
        default=None, ge=1, description="maxItems of commands in the enforced schema")
    output_limit_bytes: int = Field(default=10_000, ge=256, description="Cap on terminal text per observation")
    window_width: int = Field(default=160, ge=40)
    window_height: int = Field(default=40, ge=10)
    history_limit: int = Field(default=50_000, ge=1000, description="tmux scrollback lines")
    paste_threshold_bytes: int = Field(
        default=512, ge=1, description="Keystrokes longer than this go through a tmux paste buffer")
    session_name: str = Field(default="terminus", pattern=r"^[A-Za-z0-9_-]+$")
    tmux_install: Literal["auto", "never"] = Field(
        default="auto", description="Install tmux when the sandbox lacks it (see the README), or fail setup")
    tmux_install_timeout_sec: float = Field(default=300.0, gt=0)
    request_timeout_sec: float = Field(default=300.0, gt=0, description="Per model call")
    request_retries: int = Field(default=3, ge=0, description="Retries of a model call on transport errors / 502-504")
    tmux_exec_timeout_sec: float = Field(default=30.0, gt=0, description="Per tmux command in the sandbox")
    finish_before_timeout_sec: float = Field(
        default=5.0, ge=0, description="End the episode this long before the task's agent timeout, keeping its "
        "trajectory and metrics (0: let the runtime cancel it); unused when the timeout is under twice this")


class AgentTimeBudgetError(ModelError):
    """The episode ran out of the task's agent time and ended itself just before the runtime's timeout.

    Not a ``TimeoutError`` on purpose: the runtime turns those into its own
    ``AgentTimeoutError`` and would drop the trajectory attached here.
    """

    stop_reason = "agent_timeout"


class _Episode:
    """The state of one run: messages, counters and timers."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.sent = 0
        """How many of ``messages`` the model has seen (the rest are yet to be sent)."""
        self.turns = 0
        self.completion_tokens: list[int] = []
        self.parse_failures = 0
        self.commands_sent = 0
        self.model_seconds = 0.0
        self.wait_seconds = 0.0
        self.last_total_tokens: int | None = None
        self.deadline: float | None = None
        self.agent_timeout_sec: float = math.inf
        """``time.monotonic()`` by which the episode ends itself (before the runtime's agent timeout)."""
        self.final_answer: str | None = None
        self.notes: list[str] = []
        self.started = time.monotonic()


class TerminusHarness(Harness, spec=TERMINUS):
    """Terminus: the model drives a tmux terminal with keystrokes, answering in JSON each turn."""

    Options = TerminusOptions

    options: TerminusOptions

    def __init__(self, options: TerminusOptions | dict[str, Any] | None = None) -> None:
        super().__init__(options)
        self.tmux: TmuxSession | None = None
        self.setup_notes: list[str] = []

    # -- setup -----------------------------------------------------------------------
    async def setup(self, sandbox: Sandbox, task: Task) -> None:
        mounted = await mount_world_files(sandbox, task)  # a world task's data, where its instruction says
        if mounted:
            self.setup_notes.append(f"terminus: {mounted}")
        how = await ensure_tmux(sandbox, mode=self.options.tmux_install, timeout=self.options.tmux_install_timeout_sec)
        if how != "present":
            self.setup_notes.append(f"terminus: tmux was missing from the sandbox and installed ({how})")
        self.tmux = self._session(sandbox)
        await self.tmux.start()

    def _session(self, sandbox: Sandbox) -> TmuxSession:
        o = self.options
        return TmuxSession(
            sandbox, name=o.session_name, width=o.window_width, height=o.window_height, history_limit=o.history_limit,
            paste_threshold=o.paste_threshold_bytes, output_limit_bytes=o.output_limit_bytes,
            exec_timeout=o.tmux_exec_timeout_sec,
        )

    # -- the episode -----------------------------------------------------------------------
    async def run(self, task: Task, sandbox: Sandbox, policy: Policy | None) -> Trajectory:
        if policy is None:
            raise ConfigError("the terminus harness calls a model: set [policy] base_url (e.g. `tackroom model up`)")
        if self.tmux is None:
            raise RuntimeError("TerminusHarness.run called before setup")
        o = self.options
        ep = _Episode()
        ep.notes.extend(self.setup_notes)
        margin = o.finish_before_timeout_sec
        ep.agent_timeout_sec = task.config.agent.timeout_sec
        if margin and ep.agent_timeout_sec > 2 * margin:
            ep.deadline = ep.started + ep.agent_timeout_sec - margin
        params: dict[str, Any] = {"max_tokens": o.max_tokens, "temperature": o.temperature}
        if o.structured_outputs:
            schema = reply_schema(max_duration=o.max_command_duration_sec, max_chars=o.structured_max_chars,
                                  max_commands=o.structured_max_commands)
            params["response_format"] = response_format(schema)
        client = ChatClient(policy, request_timeout_s=o.request_timeout_sec, retries=o.request_retries)
        try:
            limit = o.context_limit_tokens or await client.context_limit()
            observation = await self._observe(ep)
            ep.messages = [
                {"role": "system", "content": prompts.system_prompt(o.max_command_duration_sec)},
                {"role": "user", "content": prompts.TASK.format(instruction=task.instruction.strip(),
                                                                observation=observation.render())},
            ]
            return await self._loop(ep, client, params, limit)
        except TackroomError as exc:
            stop = "context_exhausted" if isinstance(exc, ContextExhaustedError) else (
                getattr(exc, "stop_reason", None) or f"{exc.error_class or 'infra'}_error")
            exc.trajectory = self._trajectory(ep, stop)  # type: ignore[attr-defined]
            raise
        finally:
            await client.aclose()

    async def _loop(self, ep: _Episode, client: ChatClient, params: dict[str, Any], limit: int | None) -> Trajectory:
        o = self.options
        failures_in_a_row = 0
        confirming = False
        while True:
            if ep.turns >= o.max_turns:
                ep.notes.append(f"terminus: stopped after max_turns = {o.max_turns}")
                return self._trajectory(ep, "max_turns")
            self._check_time(ep)
            self._check_budget(ep, limit)
            reply = await self._ask(ep, client, params)
            parsed = parse_reply(reply.content, max_duration=o.max_command_duration_sec)
            if not parsed.ok:
                ep.parse_failures += 1
                failures_in_a_row += 1
                if failures_in_a_row > o.max_parse_retries:
                    error = ModelError(
                        f"the model gave {failures_in_a_row} invalid answers in a row (last: {'; '.join(parsed.errors)}); "
                        "try structured_outputs = true, or a larger max_tokens"
                    )
                    error.stop_reason = "invalid_replies"  # type: ignore[attr-defined]
                    raise error
                ep.messages.append({"role": "user", "content": prompts.parse_error(
                    parsed.errors, truncated=reply.finish_reason == "length")})
                continue
            failures_in_a_row = 0
            turn = parsed.reply
            assert turn is not None
            for command in turn.commands:
                await self._type(ep, command.keystrokes)
                ep.commands_sent += 1
                t0 = time.monotonic()
                await asyncio.sleep(min(command.duration, self._remaining(ep)))
                ep.wait_seconds += time.monotonic() - t0
                self._check_time(ep)
            if turn.task_complete and confirming:
                ep.final_answer = turn.analysis or None
                return self._trajectory(ep, "completed")
            observation = await self._observe(ep)
            confirming = turn.task_complete
            text = prompts.CONFIRM.format(observation=observation.render()) if confirming else observation.render()
            ep.messages.append({"role": "user", "content": prompts.with_warnings(text, parsed.warnings)})

    async def _ask(self, ep: _Episode, client: ChatClient, params: dict[str, Any]) -> ChatReply:
        ep.turns += 1
        t0 = time.monotonic()
        deadline = asyncio.timeout(self._remaining(ep) if ep.deadline is not None else None)
        try:
            async with deadline:
                reply = await client.complete(ep.messages, **params)
        except TimeoutError:
            if deadline.expired():
                self._check_time(ep)
            raise
        finally:
            ep.model_seconds += time.monotonic() - t0
        ep.sent = len(ep.messages) + 1
        ep.messages.append({"role": "assistant", "content": reply.content})
        if reply.completion_tokens is not None:
            ep.completion_tokens.append(reply.completion_tokens)
        ep.last_total_tokens = reply.total_tokens
        return reply

    @staticmethod
    def _remaining(ep: _Episode) -> float:
        return max(0.0, ep.deadline - time.monotonic()) if ep.deadline is not None else math.inf

    def _check_time(self, ep: _Episode) -> None:
        """End the episode (keeping its trajectory) once the self-imposed deadline before the agent timeout passed."""
        if ep.deadline is not None and time.monotonic() >= ep.deadline:
            error = AgentTimeBudgetError(
                f"the episode ended itself {self.options.finish_before_timeout_sec:g}s before the task's "
                f"{ep.agent_timeout_sec:g}s agent timeout (after {ep.turns} turns); raise [agent] timeout_sec "
                "or lower max_tokens / max_turns"
            )
            raise error

    def _estimate(self, messages: list[dict[str, Any]]) -> int:
        return sum(math.ceil(len(str(m.get("content") or "")) / self.options.chars_per_token) + 8 for m in messages)

    def _check_budget(self, ep: _Episode, limit: int | None) -> None:
        """End the episode before a request whose prompt plus a full answer would not fit the context."""
        if limit is None:
            return
        if ep.last_total_tokens is not None:
            needed = ep.last_total_tokens + self._estimate(ep.messages[ep.sent:])
        else:
            needed = self._estimate(ep.messages)
        if needed + self.options.max_tokens > limit:
            raise ContextExhaustedError(
                f"context budget nearly exhausted: the next prompt is about {needed} tokens and a turn may use "
                f"{self.options.max_tokens}, over the {limit}-token context; the episode ends here "
                "(raise context_limit_tokens or lower max_tokens / output_limit_bytes)"
            )

    async def _type(self, ep: _Episode, keystrokes: str) -> None:
        assert self.tmux is not None
        try:
            await self.tmux.send(keystrokes)
        except SandboxError:
            if await self._revive(ep):
                await self.tmux.send(keystrokes)
            else:
                raise

    async def _observe(self, ep: _Episode) -> Observation:
        assert self.tmux is not None
        try:
            return await self.tmux.observe()
        except SandboxError:
            if not await self._revive(ep):
                raise
            observation = await self.tmux.observe()
            return Observation(f"(the shell had exited; a new terminal session was started)\n{observation}", False)

    async def _revive(self, ep: _Episode) -> bool:
        """Start a fresh session when the model ended the shell (``exit``); False if the session is not the problem."""
        assert self.tmux is not None
        if await self.tmux.alive():
            return False
        ep.notes.append("terminus: the tmux session ended (the shell exited); started a new one")
        await self.tmux.start()
        return True

    # -- the result --------------------------------------------------------------------------
    def _trajectory(self, ep: _Episode, stop_reason: str) -> Trajectory:
        tokens = ep.completion_tokens
        metrics = {
            "turns": float(ep.turns),
            "assistant_tokens_per_turn": sum(tokens) / len(tokens) if tokens else 0.0,
            "assistant_tokens_max": float(max(tokens, default=0)),
            "assistant_tokens_total": float(sum(tokens)),
            "parse_failures": float(ep.parse_failures),
            "commands_sent": float(ep.commands_sent),
            "model_time_s": round(ep.model_seconds, 4),
            "sandbox_time_s": round(self.tmux.exec_seconds if self.tmux else 0.0, 4),
            "wait_time_s": round(ep.wait_seconds, 4),
            "episode_time_s": round(time.monotonic() - ep.started, 4),
        }
        if ep.last_total_tokens is not None:
            metrics["context_tokens_last"] = float(ep.last_total_tokens)
        # The conversation as the model saw it: drop trailing messages that were never sent.
        return Trajectory(
            messages=list(ep.messages[: ep.sent]),
            final_answer=ep.final_answer,
            stop_reason=stop_reason,
            metrics=metrics,
            notes=list(ep.notes),
        )
