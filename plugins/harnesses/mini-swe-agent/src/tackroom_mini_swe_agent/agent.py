"""mini-swe-agent's own pieces, assembled for one trial: its ``DefaultAgent``, its text-based litellm model aimed
at the trial's policy, and :class:`~tackroom_mini_swe_agent.environment.SandboxEnvironment`.

Imported in the agent's thread (or ``setup``), never at plugin discovery: litellm takes seconds to import.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

import yaml

from tackroom import Policy
from tackroom_mini_swe_agent.environment import SandboxEnvironment
from tackroom_mini_swe_agent.startup import prepare_import
from tackroom_sandbox_kit import SyncSandbox

prepare_import()
# mini-swe-agent reads its settings when first imported: only after prepare_import (startup.py)
import litellm
import openai
from minisweagent import __version__ as MINI_SWE_AGENT_VERSION
from minisweagent.agents.default import DefaultAgent
from minisweagent.config import builtin_config_dir
from minisweagent.models.litellm_textbased_model import LitellmTextbasedModel
from minisweagent.utils.serialize import recursive_merge

# litellm prints help banners to stdout on errors (`tackroom run --json` writes its result there), among them the
# price lookups that fail for every local model; the errors themselves still reach the harness.
litellm.suppress_debug_info = True

Profile = Literal["full", "compact"]
TEXTBASED_CONFIG = "mini_textbased.yaml"
"""mini-swe-agent's config for one bash command per turn in a fenced block (no tool calls)."""
COMPACT_CONFIG = Path(__file__).with_name("compact.yaml")
OPENAI_PARAMS = {"temperature", "top_p", "max_tokens", "max_completion_tokens", "seed", "stop", "n",
                 "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs"}
"""Sampling keys litellm's ``openai/`` provider sends as they are; the rest go in ``extra_body`` (vLLM's)."""
TRANSIENT = (litellm.exceptions.APIConnectionError, litellm.exceptions.InternalServerError,
             litellm.exceptions.ServiceUnavailableError, litellm.exceptions.RateLimitError)
"""Model-call failures worth another try (``Timeout`` is an ``APIConnectionError``)."""

__all__ = ["MINI_SWE_AGENT_VERSION", "PolicyModel", "build_agent", "endpoint_failure", "load_config"]


def load_config(profile: Profile, overrides: dict[str, Any]) -> dict[str, Any]:
    """mini-swe-agent's text-based config, the compact variant merged over it for ``compact``, then ``overrides``."""
    config = yaml.safe_load((builtin_config_dir / TEXTBASED_CONFIG).read_text(encoding="utf-8"))
    if profile == "compact":
        config = recursive_merge(config, yaml.safe_load(COMPACT_CONFIG.read_text(encoding="utf-8")))
    return recursive_merge(config, overrides)


class PolicyModel(LitellmTextbasedModel):
    """mini-swe-agent's text-based litellm model, bounded for a trial.

    Each request ends by the run's deadline and is never sent once the run was stopped. mini-swe-agent's own
    retry (up to ten tries, 4 to 60 s apart, set only by a process-wide variable) is turned off: transient
    failures get ``retries`` quick tries here, each with the time that is left, and what still fails ends the
    episode for the harness to classify (the runtime retries an ``infra`` trial).
    """

    abort_exceptions = [BaseException]

    def __init__(self, *, box: SyncSandbox, deadline: float | None, request_timeout: float, retries: int,
                 **config: Any) -> None:
        super().__init__(**config)
        self.box = box
        self.deadline = deadline
        self.request_timeout = request_timeout
        self.retries = retries
        self.replies = 0
        """Model calls that were answered (a reply reached the agent)."""

    def _query(self, messages: list[dict[str, str]], **kwargs: Any) -> Any:
        for attempt in range(self.retries + 1):
            self.box.raise_if_stopped()
            timeout = self.request_timeout
            if self.deadline is not None:  # a second past it: the runner stops the run first, then this ends
                timeout = max(min(timeout, self.deadline - time.time() + 1.0), 0.5)
            try:
                response = super()._query(messages, timeout=timeout, max_retries=0, **kwargs)
            except TRANSIENT:
                if attempt == self.retries or (self.deadline is not None and time.time() + 2 ** attempt >= self.deadline):
                    raise
                time.sleep(2 ** attempt)
                continue
            self.replies += 1
            return response
        raise AssertionError("unreachable: the last try returns or raises")


def build_agent(box: SyncSandbox, policy: Policy, *, profile: Profile, overrides: dict[str, Any], max_turns: int,
                max_format_errors: int, max_tokens: int, command_timeout: float, env: dict[str, str], cwd: str,
                deadline: float | None, request_timeout: float, retries: int) -> DefaultAgent:
    """mini-swe-agent's ``DefaultAgent`` for one episode: its config (``profile``, ``overrides``), the step limit,
    no cost limit (a local model has no price, so its cost is 0 and lookups may fail: ``ignore_errors``)."""
    config = load_config(profile, overrides)
    sampling = dict(policy.sampling)
    sampling.setdefault("max_tokens", max_tokens)
    extra_body = {k: v for k, v in sampling.items() if k not in OPENAI_PARAMS}
    model_kwargs = {**config["model"].get("model_kwargs", {}), **{k: v for k, v in sampling.items() if k in OPENAI_PARAMS},
                    "api_base": policy.base_url, "api_key": policy.api_key or "EMPTY"}
    if extra_body:
        model_kwargs["extra_body"] = extra_body
    model = PolicyModel(
        box=box, deadline=deadline, request_timeout=request_timeout, retries=retries,
        **{**config["model"], "model_kwargs": model_kwargs},
        # litellm's `openai/` provider sends `policy.model` unchanged to `api_base` (the gateway or the engine).
        model_name=f"openai/{policy.model}",
        cost_tracking="ignore_errors",
    )
    environment = SandboxEnvironment(box, cwd=cwd, env={**config.get("environment", {}).get("env", {}), **env},
                                     timeout=command_timeout)
    agent_config = {**config["agent"], "step_limit": max_turns, "cost_limit": 0.0,
                    "max_consecutive_format_errors": max_format_errors, "wall_time_limit_seconds": 0,
                    "output_path": None}
    return DefaultAgent(model, environment, **agent_config)


def endpoint_failure(exc: BaseException) -> tuple[str, str] | None:
    """How a failed model call counts: ``("model", stop_reason)`` when the endpoint rejected this conversation
    (context exhausted, another 4xx but 408/429), ``("infra", "endpoint_failing")`` when it is down or failing;
    ``None`` for an exception that is not a model call's."""
    if isinstance(exc, litellm.exceptions.ContextWindowExceededError):
        return "model", "context_exhausted"
    if not isinstance(exc, openai.OpenAIError):  # litellm's exceptions are openai's
        return None
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and 400 <= status < 500 and status not in (401, 403, 404, 408, 429):
        return "model", "model_error"
    return "infra", "endpoint_failing"
