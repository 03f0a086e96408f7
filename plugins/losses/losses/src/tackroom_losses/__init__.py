"""tackroom-losses: policy losses and their aggregations, registered through the ``tackroom_losses`` hook.

Importing this module does not import torch: each :class:`tackroom.LossSpec`
names its function as ``"tackroom_losses.<module>:<function>"`` and the
trainer imports it on first use. The functions themselves
(:mod:`tackroom_losses.ppo_clip`, :mod:`~tackroom_losses.dppo`,
:mod:`~tackroom_losses.glm5`, :mod:`~tackroom_losses.aggregation`) need torch.
"""

from __future__ import annotations

import tackroom
from tackroom_losses.mappings import importance_sampling_on_tinker, ppo_on_tinker, skyrl_fields
from tackroom_losses.options import DppoOptions, Glm5Options, LossOptions, PpoClipOptions

SPECS: tuple[tackroom.LossSpec, ...] = (
    tackroom.LossSpec(
        name="ppo_clip",
        fn="tackroom_losses.ppo_clip:ppo_clip",
        aggregation="token_mean",
        summary="PPO clipped surrogate against the old policy (SkyRL's 'regular')",
        Options=PpoClipOptions,
        capabilities=frozenset({"old_logprobs"}),
        mappings={"skyrl": skyrl_fields, "tinker": ppo_on_tinker},
    ),
    tackroom.LossSpec(
        name="dppo",
        fn="tackroom_losses.dppo:dppo",
        aggregation="token_mean",
        summary="DPPO: binary TV (or binary KL) trust-region mask against rollout logprobs, delta 0.15",
        Options=DppoOptions,
        capabilities=frozenset({"rollout_logprobs"}),
        mappings={"skyrl": skyrl_fields, "tinker": importance_sampling_on_tinker},
    ),
    tackroom.LossSpec(
        name="glm5",
        fn="tackroom_losses.glm5:glm5",
        aggregation="token_mean",
        summary="GLM-5 agentic loss: truncated importance weight against rollout logprobs",
        Options=Glm5Options,
        capabilities=frozenset({"rollout_logprobs"}),
        mappings={"skyrl": skyrl_fields, "tinker": importance_sampling_on_tinker},
    ),
)
"""Every loss this distribution provides. Capabilities: ``old_logprobs`` — needs the
old policy's logprobs (a forward pass before the update); ``rollout_logprobs`` — uses
the rollout engine's logprobs instead, so the trainer may skip that pass. Mappings: how each runs on
``tackroom train``'s backends (:mod:`tackroom_losses.mappings`)."""


tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@tackroom.hookimpl
def tackroom_losses(register: tackroom.Registrar) -> None:
    for spec in SPECS:
        register.add_loss(spec)


__all__ = ["SPECS", "DppoOptions", "Glm5Options", "LossOptions", "PpoClipOptions", "tackroom_losses"]
