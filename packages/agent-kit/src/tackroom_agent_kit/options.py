"""The ``[harness]`` options every agent running in the sandbox has: its pinned release and install, the profile for
small contexts, the turn limit, and the deadlines and limits of the watch over it.

A harness subclasses :class:`AgentOptions`, redeclaring a field where its default (``version``, ``sandbox_dir``,
``compact_below_context``) or the reason behind it (``hang_timeout_sec``) is its own, and adding its own fields."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

from pydantic import Field

from tackroom import PluginOptions
from tackroom_agent_kit.relay import BodyFill
from tackroom_agent_kit.tool_choice import ToolChoice, with_tool_choice

Profile = Literal["full", "compact"]


class AgentOptions(PluginOptions):
    """What every agent harness of this kit reads; see each harness's README for its defaults."""

    version: str = Field(description="The agent's npm release to run (installed once into the host cache)")
    cache_dir: str | None = Field(default=None, description="Host install cache (default ~/.cache/tackroom/<harness>)")
    install_timeout_sec: float = Field(default=600.0, gt=0, description="Limit for the one-time npm install")
    profile: Literal["auto", "full", "compact"] = Field(
        default="auto",
        description="full: the agent's own system prompt and tools; compact: a short prompt and a few tools, for "
        "small-context models; auto: compact when the model's context is below compact_below_context")
    compact_below_context: int = Field(default=16384, gt=0, description="auto picks compact below this context length")
    prompt: str | None = Field(default=None, description="System prompt replacing the profile's")
    max_turns: int | None = Field(default=50, gt=0, description="Model calls per episode (enforced by the relay)")
    tool_choice: ToolChoice = Field(
        default="auto",
        description="required: every model call that offers tools must call one of them, sampled under the tool's "
        "JSON schema (the relay sets the call's tool choice; the episode then ends at max_turns); auto: as the agent "
        "sends it")
    sandbox_dir: str = Field(description="Where the agent, its config and state live in the sandbox")
    hang_timeout_sec: float = Field(
        default=900.0, gt=0, description="No output and no model call in flight for this long is a hang")
    max_model_errors: int = Field(
        default=3, ge=1, description="Failed model calls after which the endpoint counts as down (infra)")
    timeout_margin_sec: float = Field(
        default=5.0, ge=0,
        description="Stop the agent this long (at most a fifth of the agent timeout) before the agent timeout, to "
        "keep its trajectory")
    kill_grace_sec: int = Field(default=1, ge=0, description="Seconds between TERM and KILL when stopping the agent")
    poll_interval_sec: float = Field(default=1.0, gt=0, description="Longest pause between progress checks")
    log_tail_chars: int = Field(default=1500, ge=0, description="How much of the agent's stderr an error message carries")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for the agent")

    def cache_path(self) -> Path | None:
        """``cache_dir`` with ``~`` expanded; None for the default."""
        return Path(self.cache_dir).expanduser() if self.cache_dir else None

    def deadline(self, agent_timeout_sec: float) -> float:
        """When (``time.monotonic()``) to stop the agent: ``timeout_margin_sec`` (at most a fifth of the agent
        timeout) before the runtime's own timeout cancels the run, so the trajectory survives."""
        return time.monotonic() + agent_timeout_sec - min(self.timeout_margin_sec, agent_timeout_sec / 5)

    def relay_fill(self, fill: BodyFill | None = None) -> BodyFill | None:
        """The relay's fill for this harness: its own ``fill`` (the policy's sampling), then ``tool_choice``."""
        return with_tool_choice(fill, self.tool_choice)

    def profile_for(self, context: int) -> Profile:
        """The profile to run with a model of ``context`` tokens."""
        if self.profile != "auto":
            return self.profile
        return "compact" if context < self.compact_below_context else "full"
