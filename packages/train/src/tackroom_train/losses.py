"""tackroom losses in SkyRL's ``PolicyLossRegistry``.

Every loss any installed plugin registers through ``tackroom_losses`` goes in
as ``tackroom_<name>``. SkyRL's reducer keeps only Python numbers, while a
tackroom loss may return its metrics as 0-dim tensors (no host sync inside
the loss), so the wrapper converts them once per call. When Ray is up, SkyRL's
registry also puts each function in its named registry actor, which is how the
policy workers (other processes) find them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tackroom import LossSpec
from tackroom_app import get_plugin_manager
from tackroom_train.skyrl_config import LOSS_PREFIX


def _floats(metrics: dict[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in metrics.items():
        out[key] = float(value.detach().float().item()) if hasattr(value, "detach") else float(value)
    return out


def skyrl_callable(spec: LossSpec) -> Callable[..., Any]:
    """The spec's function with SkyRL's contract (same arguments, metrics as floats)."""
    fn = spec.load()

    @functools.wraps(fn)
    def policy_loss(log_probs, old_log_probs, advantages, config, loss_mask=None, rollout_logprobs=None):
        loss, metrics = fn(log_probs, old_log_probs, advantages, config, loss_mask, rollout_logprobs)
        return loss, _floats(metrics)

    return policy_loss


def installed_losses(manager: Any = None) -> list[LossSpec]:
    manager = manager or get_plugin_manager()
    return [manager.get("loss", entry.name) for entry in manager.entries("loss")]


def register_losses(registry: Any = None, manager: Any = None) -> list[str]:
    """Register every installed tackroom loss into SkyRL's registry; returns the SkyRL names.

    Re-registering replaces an earlier entry of the same name, so a second
    trainer in one process is harmless.
    """
    if registry is None:
        from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry as registry
    names = []
    for spec in installed_losses(manager):
        name = LOSS_PREFIX + spec.name
        if name in registry.list_available():
            registry.unregister(name)
        registry.register(name, skyrl_callable(spec))
        names.append(name)
    return names
