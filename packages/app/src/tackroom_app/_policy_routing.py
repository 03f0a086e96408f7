"""Policy routing: whether a harness reaches its model through the policy gateway, and the gateway that does it.

A chat-only harness (capability ``chat``) goes through a gateway when one is installed (exact token ids),
else straight to the endpoint; ``[policy] gateway`` decides when set. `tackroom run`, the matrix and the
trainer all decide it here; the gateway comes from the ``tackroom_policy_gateway`` hook (core imports none).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from tackroom._endpoint import Endpoint, served_model
from tackroom._errors import ConfigError
from tackroom._manager import PluginManager, get_plugin_manager
from tackroom._policy import redact_url

log = logging.getLogger("tackroom")

GATEWAY_MISSING = (
    "{what} asks for exact token ids through the policy gateway (policy.gateway = true), and no installed "
    "package provides one: pip install tackroom-gateway (./packages/gateway in the tackroom repository), or "
    "leave policy.gateway unset to chat with the endpoint directly, without token ids"
)


def gateway_installed(manager: PluginManager | None = None) -> bool:
    """Whether an installed plugin implements ``tackroom_policy_gateway`` (tackroom-gateway does)."""
    return bool((manager or get_plugin_manager()).hook.tackroom_policy_gateway.get_hookimpls())


def wants_gateway(policy: Endpoint, harness_cls: type, manager: PluginManager | None = None) -> bool:
    """Whether trials of ``harness_cls`` reach the model through the policy gateway: ``policy.gateway`` when set,
    else whether it is chat-only and a gateway is installed (without one it chats straight to the endpoint)."""
    if policy.gateway is not None:
        return policy.gateway
    return "chat" in harness_cls.capabilities and gateway_installed(manager)


def check_gateway_installed(policy: Endpoint, harness_cls: type, manager: PluginManager | None = None) -> None:
    """The :class:`ConfigError` :func:`policy_routing` would raise for a missing gateway, raised now: before a
    run claims a folder or starts a sandbox."""
    if not policy.configured or not wants_gateway(policy, harness_cls, manager):
        return
    if not gateway_installed(manager):
        raise ConfigError(GATEWAY_MISSING.format(what=f"harness {getattr(harness_cls, 'name', None)!r}"))


def policy_gateway(*, base_url: str, model: str | None, api_key: str, tokenizer: str,
                   manager: PluginManager | None = None,
                   harness: str | None = None) -> contextlib.AbstractAsyncContextManager[Any]:
    """The ``tackroom_policy_gateway`` hook's gateway in front of the engine at ``base_url`` (enter it with ``async
    with``); ``model`` ``None`` or ``"default"``: the engine's own. ``tokenizer`` must match the engine (the wrong
    one corrupts every token id silently). No plugin provides one: a :class:`ConfigError` saying what to install.
    """
    manager = manager or get_plugin_manager()
    gateway = manager.hook.tackroom_policy_gateway(
        base_url=base_url, model=None if model == "default" else model, api_key=api_key, tokenizer=tokenizer)
    if gateway is None:
        raise ConfigError(GATEWAY_MISSING.format(what=f"harness {harness!r}" if harness else "the harness"))
    return gateway


def gateway_sessions(gateway: Any, *, sampling: dict[str, Any] | None = None, label: str | None = None) -> Any:
    """``TrialPlugins.policy_for`` for a running ``gateway``: a fresh gateway session per trial attempt."""
    return gateway.trial_sessions(sampling=sampling or {}, label=label)


@contextlib.asynccontextmanager
async def policy_routing(policy: Endpoint, harness_cls: type, plugins: Any,
                         manager: PluginManager | None = None) -> AsyncIterator[Any]:
    """While open, route the trials of ``plugins`` through one policy gateway when the harness needs it (nothing
    happens when ``policy`` names no endpoint or the harness calls the engine directly); yields that gateway (its
    owner may pause and resume it for a weight update), or None."""
    if not policy.configured or not wants_gateway(policy, harness_cls, manager):
        if policy.configured and "chat" in harness_cls.capabilities:
            log.warning("harness %r chats with %s directly: no token ids are recorded (pip install tackroom-gateway, "
                        "or [policy] gateway = true, for exact token ids)",
                        harness_cls.name, redact_url(policy.endpoint))
        if policy.configured and policy.served_name is None and getattr(plugins, "policy", None) is not None:
            plugins.policy = policy.policy(served=await served_model(policy))
        yield None
        return
    async with policy_gateway(base_url=policy.endpoint, model=policy.served_name, api_key=policy.resolved_api_key(),
                              tokenizer=policy.tokenizer or "smollm2", manager=manager,
                              harness=getattr(harness_cls, "name", None)) as gateway:
        plugins.policy_for = gateway_sessions(gateway, sampling=policy.sampling, label=policy.label)
        yield gateway
