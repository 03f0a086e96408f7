"""The rollout concurrency a config allows, and why (the Mercor/SkyRL guide's sizing rule).

Two ceilings bound how many trials run at once:

- **staleness**: the fully-async trainer never holds more than
  ``(max_staleness_steps + 1) × mini_batch_size`` groups in flight, each of
  ``samples_per_prompt`` trials;
- **KV cache**: each running trial may grow to ``context_length`` tokens, so
  the engines' KV caches fit ``num_engines × kv_cache_tokens_per_engine //
  context_length`` of them without preemption.

Rollout concurrency is the smaller of the two. SkyRL counts its generation
workers in groups, so the worker count is that concurrency divided by the
group size, kept within what the fully-async trainer accepts
(``mini_batch_size ≤ workers ≤ mini_batch_size × (staleness + 1)``).
"""

from __future__ import annotations

from pydantic import BaseModel

from tackroom_train.config import GpuSplit, TrainKnobs


class Ceilings(BaseModel):
    """Derived concurrency numbers, printed by ``tackroom train``."""

    num_engines: int
    staleness_ceiling: int
    """Trials: (max_staleness_steps + 1) × mini_batch_size × samples_per_prompt."""
    kv_cache_ceiling: int | None
    """Trials whose worst-case context fits the engines' KV caches; None when the KV size is not given."""
    rollout_concurrency: int
    """Trials in flight: min(kv_cache_ceiling, staleness_ceiling), and the [rollout] cap if lower."""
    generation_workers: int
    """SkyRL's ``num_parallel_generation_workers`` (groups in flight)."""
    bound_by: str
    """Which ceiling decided: ``staleness``, ``kv_cache`` or ``rollout.max_concurrency``."""
    warnings: list[str] = []

    def lines(self) -> list[str]:
        kv = "not given ([gpus] kv_cache_tokens_per_engine)" if self.kv_cache_ceiling is None else str(self.kv_cache_ceiling)
        return [
            f"inference engines          {self.num_engines}",
            f"staleness ceiling (trials) {self.staleness_ceiling}",
            f"KV-cache ceiling (trials)  {kv}",
            f"rollout concurrency        {self.rollout_concurrency}  (bound by {self.bound_by})",
            f"generation workers (groups) {self.generation_workers}",
            *(f"warning: {w}" for w in self.warnings),
        ]


def derive_ceilings(t: TrainKnobs, g: GpuSplit, max_concurrency: int | None = None) -> Ceilings:
    """The ceilings of ``[train]`` and ``[gpus]``, capped by ``[rollout] max_concurrency``."""
    engines = g.inference // g.tensor_parallel_size
    group = t.samples_per_prompt
    staleness = (t.max_staleness_steps + 1) * t.mini_batch_size * group
    kv = None if g.kv_cache_tokens_per_engine is None else engines * g.kv_cache_tokens_per_engine // g.context_length
    concurrency, bound = staleness, "staleness"
    if kv is not None and kv < concurrency:
        concurrency, bound = kv, "kv_cache"
    if max_concurrency is not None and max_concurrency < concurrency:
        concurrency, bound = max_concurrency, "rollout.max_concurrency"
    warnings = []
    workers = max(1, concurrency // group)
    low, high = t.mini_batch_size, t.mini_batch_size * (t.max_staleness_steps + 1)
    if workers < low:
        warnings.append(
            f"the {bound} ceiling allows {concurrency} trials ({workers} groups), fewer than one mini-batch "
            f"({low} groups of {group}); SkyRL needs at least {low} generation workers, so the engines will queue "
            "requests (lower mini_batch_size or samples_per_prompt, or add inference GPUs)")
    workers = min(max(workers, low), high)
    if kv == 0:
        warnings.append(f"one trajectory's context ({g.context_length} tokens) exceeds an engine's KV cache")
    return Ceilings(num_engines=engines, staleness_ceiling=staleness, kv_cache_ceiling=kv,
                    rollout_concurrency=max(1, concurrency), generation_workers=workers, bound_by=bound,
                    warnings=warnings)
