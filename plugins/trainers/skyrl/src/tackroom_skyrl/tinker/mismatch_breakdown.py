"""Why a step's |trainer − rollout| logprob is what it is: the mismatch split into its parts, on the engine.

A step trains a batch sampled with policy version ``v`` by the trainer at version ``v + s`` (``s`` = its
staleness). The mismatch the step reports (:func:`~.datums.mismatch`) compares the trainer's logprobs with the
sampled ones, so it holds three things at once. With the engine re-scoring the batch's exact ids (vLLM's
``prompt_logprobs``, :meth:`~.engine_sampling.EngineSampling.score`) under version ``v`` and under ``v + s``:

* ``rescored``: |engine at v − sampled|, the engine against itself. Near 0 unless the samples did not come
  from version ``v`` with these ids (an adapter swapped mid-request, a stale LoRA cache, prompt ids that are not
  the ones the engine saw, a turn that straddles a hand-off) — a bug, whatever else happens;
* ``drift``: |engine at v + s − engine at v|, how far the policy moved in ``s`` updates (0 at staleness 0):
  off-policyness, which importance sampling (and ``[train] tis_ratio_type``'s truncation) is there for;
* ``same_version``: |trainer − engine at v + s|, the trainer against the engine on the same weights: the
  two implementations' numerics (bf16 JAX vs vLLM's CPU kernels), the number the warning is about.

Means are over the trained tokens the trainer measured; :attr:`MismatchBreakdown.worst` keeps the tokens with
the largest total mismatch, where they sat (row, turn position) and each part.
"""

from __future__ import annotations

from statistics import mean
from typing import Awaitable, Callable

from pydantic import BaseModel

from tackroom_skyrl.tinker.datums import Batch

Scorer = Callable[[int, list[int]], Awaitable[list[float]]]
"""``score(version, token_ids)``: the engine's logprob of each id under that version (first id: 0)."""


class WorstToken(BaseModel):
    row: int
    position: int
    """The token's index in the row's response (observations included)."""
    token_id: int
    sampled: float
    trainer: float
    engine_sampled_version: float
    engine_trainer_version: float


class MismatchBreakdown(BaseModel):
    rescored_mean: float
    rescored_max: float
    drift_mean: float
    drift_max: float
    same_version_mean: float
    same_version_max: float
    tokens: int
    worst: list[WorstToken] = []


def explain(total: float, threshold: float, *, staleness: int, same_version: float, drift: float,
            rescored: float) -> str:
    """Why a step's mean mismatch ``total`` is above ``threshold``, from its parts: which one carries it."""
    if rescored > threshold:
        return (f"the engine does not reproduce its own samples ({rescored:.4f} a token re-scored with the sampled "
                "version): some turns were not sampled with the batch's version and ids (see the turns' "
                "policy_version in trajectory.json)")
    if same_version > threshold:
        return (f"the trainer and the engine disagree on the same weights ({same_version:.4f} a token): weights "
                "not synced, dtype/kernels, or re-tokenised text")
    return (f"the trainer and the engine agree on the same version ({same_version:.4f} a token; the engine "
            f"re-scores its samples to {rescored:.4f}); the {total:.4f} is the policy's drift across {staleness} "
            f"update(s) ({drift:.4f} a token): the batch is that far off-policy, which the importance ratio "
            "carries (and [train] tis_ratio_type truncates)")


async def measure_breakdown(batch: Batch, trainer_logprobs: list[list[float]], score: Scorer, *,
                            sampled_version: int, trainer_version: int, worst: int = 3) -> MismatchBreakdown | None:
    """Re-score the measured rows on the engine under both versions and split the mismatch (None: no trained
    token was measured)."""
    rescored, drift, same, tokens = [], [], [], []
    for r, (row, trainer_lp) in enumerate(zip(batch.rows, trainer_logprobs)):
        if not any(row.mask):
            continue
        ids = row.prompt_ids + row.response_ids
        then = await score(sampled_version, ids)
        now = then if trainer_version == sampled_version else await score(trainer_version, ids)
        base = len(row.prompt_ids)
        for j, (m, sampled) in enumerate(zip(row.mask, row.rollout_logprobs)):
            if not m:
                continue
            trainer = float(trainer_lp[row.start + j])
            rescored.append(abs(then[base + j] - sampled))
            drift.append(abs(now[base + j] - then[base + j]))
            same.append(abs(trainer - now[base + j]))
            tokens.append(WorstToken(row=r, position=j, token_id=row.response_ids[j], sampled=sampled,
                                     trainer=trainer, engine_sampled_version=then[base + j],
                                     engine_trainer_version=now[base + j]))
    if not tokens:
        return None
    tokens.sort(key=lambda t: abs(t.trainer - t.sampled), reverse=True)
    return MismatchBreakdown(rescored_mean=mean(rescored), rescored_max=max(rescored), drift_mean=mean(drift),
                             drift_max=max(drift), same_version_mean=mean(same), same_version_max=max(same),
                             tokens=len(tokens), worst=tokens[:worst])
