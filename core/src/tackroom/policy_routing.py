"""Policy routing: which harnesses reach their model through the policy gateway, and the gateway that does it.

A harness that speaks only chat (capability ``chat``) goes through a policy
gateway, which renders, tokenizes and records exact tokens; one with its own
token accounting calls the engine directly. ``[policy] gateway = true/false``
overrides the choice. `tackroom run` (one gateway per run), the matrix (one per
cell) and the trainer (one per training run) all decide it here.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from tackroom.config import PolicyConfig


def wants_gateway(policy: PolicyConfig, harness_cls: type) -> bool:
    """Chat-only harnesses go through the policy gateway (exact tokens) unless ``policy.gateway`` says otherwise."""
    if policy.gateway is not None:
        return policy.gateway
    return "chat" in harness_cls.capabilities


def policy_gateway(*, base_url: str, model: str | None, api_key: str, tokenizer: str) -> Any:
    """A policy gateway in front of the engine at ``base_url`` (enter it with ``async with``).

    ``model`` ``None`` or ``"default"``: the model the engine serves. ``tokenizer``
    must match the engine: the wrong one corrupts every token id silently.
    """
    from tackroom.gateway.engine_client import EngineSettings
    from tackroom.gateway.server import GatewaySettings, PolicyGateway

    engine = EngineSettings(base_url=base_url, model=None if model == "default" else model, api_key=api_key)
    return PolicyGateway(GatewaySettings(engine=engine, tokenizer=tokenizer))


@contextlib.asynccontextmanager
async def policy_routing(policy: PolicyConfig, harness_cls: type, plugins: Any) -> AsyncIterator[None]:
    """While open, route the trials of ``plugins`` through one policy gateway when the harness needs it.

    Nothing happens when ``policy`` has no ``base_url`` or the harness calls the engine directly.
    """
    if policy.base_url is None or not wants_gateway(policy, harness_cls):
        yield
        return
    from tackroom.gateway.trial_sessions import GatewaySessions

    async with policy_gateway(base_url=policy.base_url, model=policy.model, api_key=policy.resolved_api_key(),
                              tokenizer=policy.tokenizer or "smollm2") as gateway:
        plugins.policy_for = GatewaySessions(gateway, sampling=policy.sampling, label=policy.label)
        yield
