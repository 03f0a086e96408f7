"""The train/inference logprob mismatch check (the Mercor/SkyRL guide's Step 2) on both backends.

Mean |trainer − rollout| logprob over the trained tokens of a step: the
trainer's forward pass on the very tokens the engine sampled, against the
logprobs the engine reported. Near 0 when both run the same weights with the
same numerics; above ``[train] logprob_mismatch_warn`` (0.03; 0.1 when an engine samples:
:data:`ENGINE_MISMATCH_WARN`) something
differs (weights not synced, a different dtype or kernel, a tokenizer that
re-tokenised text), and off-policy corrections start to matter.

* SkyRL backend: SkyRL's trainer computes the number as
  ``policy/rollout_train_logprobs_abs_diff_mean``; :class:`MismatchWatch`
  wraps its tracker, warns above the threshold and adds
  ``tackroom/logprob_mismatch_warning``.
* Tinker backend: :func:`tackroom_train.tinker.datums.mismatch` computes it
  from ``forward_backward``'s logprobs; the loop prints and records it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

SKYRL_METRIC = "policy/rollout_train_logprobs_abs_diff_mean"

ENGINE_MISMATCH_WARN = 0.1
"""The threshold when rollouts sample on a vLLM engine and SkyRL's JAX backend trains (tinker backend,
``[tinker] sampler = "engine"``) and ``[train] logprob_mismatch_warn`` is not set. Two different bf16 kernel
stacks (vLLM's CPU kernels, XLA's) disagree on the same weights: measured on policy version 0 (the LoRA's B
is 0, so pure base-model numerics) 0.030 and 0.048–0.075 nats/token, per-token max 0.34. bf16 keeps 8
significant bits, so a logit of magnitude 16–32 carries a rounding error up to 0.06–0.12 in either program.
The Tinker sampler (the same JAX program family) stays at 0.005–0.018, in float32 at 0. 0.1 sits above that
floor; what the warning is for (re-tokenised text, a wrong adapter or base) is several nats on the tokens hit."""
WARNING_METRIC = "tackroom/logprob_mismatch_warning"

log = logging.getLogger("tackroom.train")


def mismatch_threshold(train: Any, *, on_engine: bool) -> float:
    """The warning threshold in effect: ``[train] logprob_mismatch_warn`` when set, else 0.03, or
    :data:`ENGINE_MISMATCH_WARN` when an engine samples and another program trains."""
    if on_engine and "logprob_mismatch_warn" not in train.model_fields_set:
        return ENGINE_MISMATCH_WARN
    return float(train.logprob_mismatch_warn)


def mismatch_warning(value: float, threshold: float) -> str | None:
    """The warning for one step's mean |trainer − rollout| logprob, or None when it is within the threshold."""
    if value <= threshold:
        return None
    return (f"mean |trainer - rollout| logprob {value:.4f} is above {threshold}: the trainer and the inference "
            "engine disagree on the sampled tokens (weights not synced, dtype/kernels, or re-tokenised text)")


class MismatchWatch:
    """SkyRL's tracker with the check: ``log(data, step, ...)`` warns when the step's mismatch is above the threshold."""

    def __init__(self, tracker: Any, threshold: float, warn: Callable[[str], None] | None = None) -> None:
        self.tracker = tracker
        self.threshold = threshold
        self.warn = warn or log.warning
        self.warnings = 0

    def log(self, data: dict[str, Any], step: int, *args: Any, **kwargs: Any) -> Any:
        value = data.get(SKYRL_METRIC)
        if value is not None:
            message = mismatch_warning(float(value), self.threshold)
            data = {**data, WARNING_METRIC: 0.0 if message is None else 1.0}
            if message is not None:
                self.warnings += 1
                self.warn(f"step {step}: {message}")
        return self.tracker.log(data, step, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tracker, name)
