"""Options of each loss: their config section, validated, with defaults.

No torch here: ``tackroom plugins`` imports this module to list the losses.

A loss function's ``config`` argument may be one of these models, a plain
mapping of their fields, or SkyRL's ``AlgorithmConfig`` (read through
:meth:`LossOptions.from_config`), so the same function runs under tackroom
and inside SkyRL's ``PolicyLossRegistry``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Self

from pydantic import Field, ValidationError

import tackroom
from tackroom_losses.errors import LossConfigError

# SkyRL's off-policy correction (TIS, sequence/outlier/token masks) is applied
# inside each of SkyRL's own losses. Ours do not apply it; silently ignoring it
# would train with a different objective than the config says.
SKYRL_OFF_POLICY_FIELDS = (
    "tis_ratio_type",
    "sequence_mask_metric",
    "outlier_token_is_threshold_low",
    "outlier_token_is_threshold_high",
    "token_mask_is_threshold_low",
    "token_mask_is_threshold_high",
)


class LossOptions(tackroom.PluginOptions):
    """Options every loss has.

    ``aggregation`` is what the trainer asks for: SkyRL's ``loss_reduction``
    of the same name, or :func:`tackroom_losses.aggregation.scale_advantages`.
    The loss function itself aggregates only when called with
    ``aggregation=`` (see the README: SkyRL pre-scales advantages and expects
    the masked sum back).
    """

    aggregation: tackroom.Aggregation = "token_mean"
    fused: bool | None = Field(
        default=None,
        description="Run the per-token math through torch.compile (one fused kernel forward, one backward). "
        "None: on CUDA tensors only",
    )

    skyrl_fields: ClassVar[dict[str, str]] = {}
    """Our field -> dotted attribute of SkyRL's ``AlgorithmConfig``."""

    @classmethod
    def from_config(cls, config: Any) -> Self:
        """These options from ``None``, an instance, a mapping or a SkyRL ``AlgorithmConfig``."""
        if config is None:
            return cls()
        if isinstance(config, cls):
            return config
        if isinstance(config, Mapping):
            try:
                return cls.model_validate(dict(config))
            except ValidationError as exc:
                raise LossConfigError(f"invalid {cls.__name__}: {exc}") from None
        if not hasattr(config, "policy_loss_type"):
            raise LossConfigError(
                f"loss config of type {type(config).__name__} is not understood; pass a {cls.__name__}, a dict of "
                f"its fields ({', '.join(cls.model_fields)}), or SkyRL's AlgorithmConfig"
            )
        return cls._from_skyrl(config)

    @classmethod
    def _from_skyrl(cls, config: Any) -> Self:
        correction = getattr(config, "off_policy_correction", None)
        enabled = [f for f in SKYRL_OFF_POLICY_FIELDS if getattr(correction, f, None) is not None]
        if enabled:
            raise LossConfigError(
                f"SkyRL off_policy_correction sets {', '.join(enabled)}, which tackroom losses do not apply; "
                "unset them (trainer.algorithm.off_policy_correction.*=null) or use one of SkyRL's built-in losses"
            )
        values: dict[str, Any] = {}
        for ours, dotted in cls.skyrl_fields.items():
            obj: Any = config
            for part in dotted.split("."):
                obj = getattr(obj, part, None)
            if obj is not None:
                values[ours] = obj
        reduction = getattr(config, "loss_reduction", None)
        if reduction in ("token_mean", "sequence_mean", "prompt_mean"):
            values["aggregation"] = reduction
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise LossConfigError(f"SkyRL AlgorithmConfig gives invalid {cls.__name__} values: {exc}") from None


class PpoClipOptions(LossOptions):
    """PPO's clipped surrogate: the ratio against the old policy is clipped to [1-low, 1+high]."""

    eps_clip_low: float = Field(default=0.2, ge=0.0, le=1.0)
    eps_clip_high: float = Field(default=0.2, ge=0.0)

    skyrl_fields: ClassVar[dict[str, str]] = {"eps_clip_low": "eps_clip_low", "eps_clip_high": "eps_clip_high"}


class DppoOptions(LossOptions):
    """DPPO: a binary trust-region mask on the divergence between trainer and rollout policy."""

    divergence: Literal["binary_tv", "binary_kl"] = Field(
        default="binary_tv",
        description="binary_tv: |pi(a) - mu(a)| of the sampled token; binary_kl: KL between the two Bernoulli "
        "distributions {a, not a}",
    )
    delta_low: float = Field(default=0.15, gt=0.0, description="threshold for tokens with negative advantage")
    delta_high: float = Field(default=0.15, gt=0.0, description="threshold for tokens with positive advantage")

    skyrl_fields: ClassVar[dict[str, str]] = {
        "divergence": "dppo.dppo_type",
        "delta_low": "dppo.delta_low",
        "delta_high": "dppo.delta_high",
    }


class Glm5Options(LossOptions):
    """GLM-5's agentic loss: importance weight against rollout logprobs, zeroed outside [1-low, 1+high]."""

    eps_clip_low: float = Field(default=0.2, ge=0.0, le=1.0)
    eps_clip_high: float = Field(default=0.2, ge=0.0)

    skyrl_fields: ClassVar[dict[str, str]] = {"eps_clip_low": "eps_clip_low", "eps_clip_high": "eps_clip_high"}
