"""The ``mini-swe-agent`` harness: mini-swe-agent's own agent loop on the host, its commands in the trial's sandbox.

mini-swe-agent (PyPI ``mini-swe-agent``) is synchronous Python: its ``DefaultAgent`` asks the model for one bash
command per turn in a fenced block, runs it in an ``Environment`` and stops when a command's output starts with
its submit marker, at its step limit or after repeated format errors. Nothing of it runs in the sandbox (which
may have no Python); it runs in a worker thread of the harness (:func:`tackroom_sandbox_kit.run_sync_agent`)
and its environment (:mod:`.environment`) runs each command through a blocking facade of the sandbox. The model
is its text-based litellm model pointed at ``policy.base_url`` (the policy gateway under ``tackroom run``: the
harness is ``chat``, so every turn is recorded token-exactly).

The trajectory is mini-swe-agent's chat with one assistant message per model call, in order (:mod:`.trajectory`);
stop reasons ``submitted``, ``max_turns``, ``format_errors``, ``agent_timeout``. Failures: the endpoint down or
failing is ``infra``, a rejected conversation (context exhausted) the model's, and any other failure of the agent
is ``infra`` before the model's first reply and the model's after it (its replies drive the agent from then on).
"""

from __future__ import annotations

import asyncio
import importlib
import time
from typing import Any, Literal

import httpx
from pydantic import Field, field_validator

from tackroom import ConfigError, Harness, PluginOptions, Policy, Sandbox, TackroomError, Task, Trajectory
from tackroom_mini_swe_agent.errors import MiniSweAgentInfraError, MiniSweAgentModelError
from tackroom_mini_swe_agent.trajectory import STOP_REASONS, chat_messages, exit_status, format_errors
from tackroom_sandbox_kit import AgentDeadlineError, SyncSandbox, run_sync_agent
from tackroom_worlds import mount_world_files

AGENT_MODULE = "tackroom_mini_swe_agent.agent"
"""Where mini-swe-agent is assembled; imported in ``setup`` (litellm takes seconds), not at plugin discovery."""
CONFIG_SECTIONS = {"agent", "model", "environment"}


class MiniSweAgentOptions(PluginOptions):
    """The ``[harness]`` section when ``name = "mini-swe-agent"``."""

    profile: Literal["auto", "full", "compact"] = Field(
        default="auto",
        description="full: mini-swe-agent's own text-based prompts (mini_textbased.yaml); compact: the same rules "
        "in shorter prompts with output cut at 2,000 characters, for small-context models; auto: compact when the "
        "model's context is below compact_below_context")
    compact_below_context: int = Field(default=16384, gt=0, description="auto picks compact below this context length")
    context_length: int | None = Field(default=None, gt=0, description="The model's context (default: asked from the policy's /models)")
    max_turns: int = Field(default=50, ge=1, description="Model calls per episode (mini-swe-agent's step_limit)")
    max_format_errors: int = Field(default=3, ge=1, description="Replies in a row without exactly one command before the episode ends")
    max_tokens_per_turn: int | None = Field(
        default=None, gt=0,
        description="Output limit per turn unless the policy's sampling sets max_tokens (default: 4096 full, 512 compact)")
    command_timeout_sec: float = Field(default=30.0, gt=0, description="Limit per command (mini-swe-agent's default)")
    request_timeout_sec: float = Field(default=600.0, gt=0, description="Limit per model request")
    model_retries: int = Field(default=2, ge=0, description="Extra tries of a model call that failed on a connection, 429 or 5xx")
    timeout_margin_sec: float = Field(
        default=5.0, ge=0,
        description="Stop the agent this long (at most a fifth of the agent timeout) before the agent timeout, to keep its trajectory")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for every command")
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="Merged over mini-swe-agent's config, by section (agent, model, environment), e.g. "
        "{agent = {instance_template = '...'}}; the options above win for the limits they set")

    @field_validator("config")
    @classmethod
    def _sections(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = set(value) - CONFIG_SECTIONS
        if unknown:
            raise ValueError(f"config has {sorted(unknown)}: mini-swe-agent's config sections are {sorted(CONFIG_SECTIONS)}")
        return value


class MiniSweAgentHarness(Harness):
    """mini-swe-agent, its own loop on the host: one bash command per turn, run in the sandbox, until it submits."""

    name = "mini-swe-agent"
    Options = MiniSweAgentOptions
    capabilities = frozenset({"needs_policy", "chat"})
    options: MiniSweAgentOptions

    world_note: str | None = None

    async def setup(self, sandbox: Sandbox, task: Task) -> None:
        self.world_note = await mount_world_files(sandbox, task)  # a world task's data, where its instruction says
        await asyncio.to_thread(importlib.import_module, AGENT_MODULE)

    async def run(self, task: Task, sandbox: Sandbox, policy: Policy | None) -> Trajectory:
        if policy is None:
            raise ConfigError("the mini-swe-agent harness calls a model: set [policy] base_url (e.g. `tackroom model up`)")
        context = self.options.context_length or await served_context_length(policy) or 32768
        profile = self.options.profile
        if profile == "auto":
            profile = "compact" if context < self.options.compact_below_context else "full"
        deadline = None
        if task.deadline is not None:
            deadline = task.deadline - min(self.options.timeout_margin_sec, max(task.deadline - time.time(), 0) / 5)
        max_tokens = self.options.max_tokens_per_turn or (512 if profile == "compact" else 4096)
        episode: dict[str, Any] = {}

        def solve(box: SyncSandbox) -> dict[str, Any]:
            agent_module = importlib.import_module(AGENT_MODULE)
            agent = agent_module.build_agent(
                box, policy, profile=profile, overrides=self.options.config, max_turns=self.options.max_turns,
                max_format_errors=self.options.max_format_errors, max_tokens=max(16, min(max_tokens, context // 4)),
                command_timeout=self.options.command_timeout_sec, env=self.options.env, cwd=sandbox.spec.workdir,
                deadline=deadline, request_timeout=self.options.request_timeout_sec, retries=self.options.model_retries)
            episode["agent"] = agent
            return agent.run(task.instruction)

        note = f"mini-swe-agent, profile {profile} (context {context})"
        try:
            await run_sync_agent(solve, sandbox, deadline=deadline)
        except AgentDeadlineError as exc:
            exc.trajectory = self._trajectory(episode, note, "agent_timeout")
            raise
        except Exception as exc:
            raise self._failure(exc, episode, note, deadline) from exc
        return self._trajectory(episode, note)

    def _failure(self, exc: Exception, episode: dict[str, Any], note: str, deadline: float | None) -> TackroomError:
        """The classified error for what ended the agent, carrying the trajectory so far."""
        agent = episode.get("agent")
        replies = agent.model.replies if agent is not None else 0
        if deadline is not None and time.time() >= deadline:  # a model request cut by the deadline, say
            return AgentDeadlineError(f"the agent was stopped at its deadline ({type(exc).__name__}: {exc})",
                                      self._trajectory(episode, note, "agent_timeout"))
        if isinstance(exc, TackroomError):  # the sandbox's own (infra, or the agent's doing)
            exc.trajectory = self._trajectory(episode, note, "sandbox_error")  # type: ignore[attr-defined]
            return exc
        counted = importlib.import_module(AGENT_MODULE).endpoint_failure(exc)
        if counted is not None:
            kind, stop = counted
            trajectory = self._trajectory(episode, note, stop)
            what = f"the policy endpoint failed after {replies} model replies: {type(exc).__name__}: {exc}"
            if kind == "model":
                return MiniSweAgentModelError(f"the endpoint rejected the conversation ({stop}): {exc}", trajectory)
            return MiniSweAgentInfraError(what, trajectory)
        trajectory = self._trajectory(episode, note, "agent_crashed")
        message = f"mini-swe-agent failed: {type(exc).__name__}: {exc}"
        if replies:
            return MiniSweAgentModelError(
                f"{message}, after {replies} model repl{'y' if replies == 1 else 'ies'} that drove it: counted as the "
                "model's (reward 0, not retried)", trajectory)
        return MiniSweAgentInfraError(f"{message}, before the model's first reply", trajectory)

    def _trajectory(self, episode: dict[str, Any], note: str, stop_reason: str | None = None) -> Trajectory:
        agent = episode.get("agent")
        if agent is None:
            return Trajectory(stop_reason=stop_reason or "not_started", notes=[note])
        messages = list(agent.messages)  # a copy: a stopped thread may still be unwinding
        status, submission = exit_status(messages)
        chat = chat_messages(messages)
        env = agent.env
        metrics = {
            "turns": float(sum(1 for m in chat if m["role"] == "assistant")),
            "format_errors": float(format_errors(messages)),
            "commands": float(env.commands),
            "command_timeouts": float(env.timeouts),
            "command_failures": float(env.failures),
            "submitted": 1.0 if status == "Submitted" else 0.0,
        }
        return Trajectory(
            messages=chat,
            final_answer=(submission or None) if status == "Submitted" else None,
            stop_reason=stop_reason or STOP_REASONS.get(status or "", status or "completed"),
            metrics=metrics,
            notes=[f"{note}, mini-swe-agent {importlib.import_module(AGENT_MODULE).MINI_SWE_AGENT_VERSION}",
                   *([self.world_note] if self.world_note else [])],
        )


async def served_context_length(policy: Policy, timeout: float = 15.0) -> int | None:
    """``max_model_len`` of the policy's model, as its ``/models`` reports it (the gateway and vLLM do)."""
    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            r = await client.get(f"{policy.base_url.rstrip('/')}/models",
                                 headers={"Authorization": f"Bearer {policy.api_key}"})
        r.raise_for_status()
        models = r.json().get("data") or []
    except (httpx.HTTPError, ValueError):
        return None
    chosen = next((m for m in models if m.get("id") == policy.model), models[0] if models else None)
    value = (chosen or {}).get("max_model_len")
    return int(value) if isinstance(value, int) and value > 0 else None
