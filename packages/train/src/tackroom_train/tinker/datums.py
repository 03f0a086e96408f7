"""From a ``GeneratorOutput`` to Tinker training data: GRPO advantages, ``Datum`` s, the loss, the mismatch check.

A row's sequence is ``prompt_ids + response_ids``; Tinker trains on
``model_input = seq[:-1]`` against ``target_tokens = seq[1:]``, so response
token ``j`` sits at target position ``len(prompt) - 1 + j``. Only tokens with
loss mask 1 carry an advantage.

Losses on this backend (``[tinker] loss_fn``, chosen in :mod:`.step_trainer`):

* ``auto`` (default): the ``[loss]`` runs as the Tinker built-in its ``LossSpec.mappings["tinker"]``
  declares (a function of its options returning the built-in's name and ``loss_fn_config``): the built-in
  whose gradient it equals here, where every step samples from the weights it then trains (one optimiser
  step per batch, a fresh sampler after it), so the ratio to the behaviour policy is 1 up to numerics
  (tackroom-losses: ``dppo`` and ``glm5`` as ``importance_sampling``, ``ppo_clip`` as ``ppo`` with its clip
  range). The ``[loss] aggregation`` is exact: see :func:`datums`.
* a Tinker built-in by name (``importance_sampling``, ``ppo``, ``cispo``).
* ``tackroom``: the loss itself, in torch, through Tinker's custom-loss path
  (:class:`TackroomLoss`: the server returns logprobs, the loss and its
  gradient w.r.t. them are computed here, the gradient goes back as the
  weights of a linear cross-entropy). For servers whose cross-entropy is the
  plain weighted sum, as the Tinker SDK assumes. SkyRL 0.4's JAX backend
  divides each sequence's cross-entropy by the sum of its weights, which
  turns negative weights (negative advantages) into a sign flip or a 1e9
  blow-up, so :mod:`.loop` refuses ``tackroom`` on a server it started.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from statistics import mean, pstdev
from typing import Any

BUILTIN_LOSSES = ("importance_sampling", "ppo", "cispo")
CONSTRAINED_KEY = "tackroom_logprobs_constrained"
"""The generator output's per-token flags of logprobs sampled under a grammar (``TokenTurn.logprobs_constrained``),
present when any is set."""
LOSS_FNS = ("auto", "tackroom", *BUILTIN_LOSSES)


def grpo_advantages(rewards: list[float], groups: list[str], masked: list[bool], *, normalize: bool = True,
                    eps: float = 1e-6) -> list[float]:
    """Per-row advantage: reward minus its group's mean (over trained rows), over the group's std when ``normalize``."""
    members: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        if not masked[i]:
            members[g].append(i)
    adv = [0.0] * len(rewards)
    for rows in members.values():
        values = [rewards[i] for i in rows]
        mu, sd = mean(values), pstdev(values)
        for i in rows:
            adv[i] = (rewards[i] - mu) / (sd + eps) if normalize else rewards[i] - mu
    return adv


def aggregation_factors(masks: list[list[int]], groups: list[str], aggregation: str) -> list[float]:
    """The per-sequence factor ``c_b`` of ``token_mean`` / ``sequence_mean`` / ``prompt_mean`` (see tackroom-losses)."""
    n = [sum(m) for m in masks]
    if aggregation == "token_mean":
        total = max(sum(n), 1)
        return [1.0 / total] * len(masks)
    if aggregation == "sequence_mean":
        return [1.0 / (len(masks) * max(k, 1)) for k in n]
    if aggregation == "prompt_mean":
        per_group: dict[str, int] = defaultdict(int)
        for k, g in zip(n, groups):
            per_group[g] += k
        return [1.0 / (len(per_group) * max(per_group[g], 1)) for g in groups]
    raise ValueError(f"unknown aggregation {aggregation!r}")


@dataclass
class Row:
    """One trained sequence, aligned to target positions of the response part."""

    prompt_ids: list[int]
    response_ids: list[int]
    mask: list[int]
    rollout_logprobs: list[float]
    advantage: float
    group: str
    constrained: list[int] = field(default_factory=list)
    """1 where the sampler's logprob was computed under a grammar (``TokenTurn.logprobs_constrained``): the trainer's
    own logprob stands in for it (the loss's reference) and the mismatch leaves it out. Empty: none."""

    def is_constrained(self, j: int) -> bool:
        return j < len(self.constrained) and bool(self.constrained[j])

    @property
    def start(self) -> int:
        """Target position of the first response token."""
        return len(self.prompt_ids) - 1


@dataclass
class Batch:
    rows: list[Row]
    aggregation: str
    group_index: dict[str, int] = field(default_factory=dict)
    factors: list[float] | None = None
    """The aggregation's ``c_b`` per row when this batch is a part of a larger one (:meth:`for_trainer`): the
    whole batch's factors, so the part's loss is the whole batch's (None: computed from these rows)."""

    def __post_init__(self) -> None:
        for r in self.rows:
            self.group_index.setdefault(r.group, len(self.group_index))

    def aggregation_factors(self) -> list[float]:
        if self.factors is not None:
            return self.factors
        return aggregation_factors([r.mask for r in self.rows], [r.group for r in self.rows], self.aggregation)

    @property
    def has_constrained(self) -> bool:
        return any(any(r.constrained) for r in self.rows)

    def subset(self, indices: list[int]) -> Batch:
        """The rows at ``indices``, keeping the whole batch's aggregation factors."""
        factors = self.aggregation_factors()
        return Batch([self.rows[i] for i in indices], self.aggregation, factors=[factors[i] for i in indices])

    def for_trainer(self, micro_batch: int) -> list[int]:
        """The rows worth a forward-backward: those a gradient flows through (trained tokens and a nonzero
        advantage), topped up with the others to a multiple of ``micro_batch`` so the trainer sees no new
        micro-batch shape (SkyRL's JAX backend compiles once per shape). A row left out has advantage 0 or no
        trained token: its loss and gradient are 0, so with :attr:`factors` kept the loss is the whole batch's
        exactly. ``micro_batch`` ≤ 0 (the server runs the batch fused, one shape per row count): every row."""
        every = list(range(len(self.rows)))
        if micro_batch <= 0:
            return every
        signal = [i for i in every if self.rows[i].advantage != 0.0 and any(self.rows[i].mask)]
        rest = [i for i in every if i not in signal]
        rest.sort(key=lambda i: not any(self.rows[i].mask))  # rows with trained tokens first (their mismatch counts)
        while len(signal) % micro_batch and rest:
            signal.append(rest.pop(0))
        return sorted(signal)

    def for_mismatch(self, micro_batch: int) -> list[int]:
        """The rows a step without learning signal runs a forward on, for its mismatch alone: one micro-batch,
        rows with trained tokens first (``micro_batch`` ≤ 0: every row, the shape the server knows)."""
        every = list(range(len(self.rows)))
        if micro_batch <= 0:
            return every
        ordered = sorted(every, key=lambda i: not any(self.rows[i].mask))
        return sorted(ordered[:micro_batch])

    @property
    def trained_tokens(self) -> int:
        return sum(sum(r.mask) for r in self.rows)

    @property
    def trained_rows(self) -> int:
        return sum(1 for r in self.rows if any(r.mask))

    @property
    def has_signal(self) -> bool:
        """Whether some trained row has a nonzero advantage. Without one the gradient is 0 and an optimiser
        step would only move the weights along Adam's stale momentum (a solved task then drifts back)."""
        return any(r.advantage != 0.0 and any(r.mask) for r in self.rows)


def batch_from_output(output: dict[str, Any], advantages: list[float], groups: list[str], aggregation: str) -> Batch:
    """Every row, masked ones included with an all-zero mask: they move nothing, count in the aggregation's
    sequence/group totals as in SkyRL, and keep the batch shape fixed (the JAX backend compiles once per shape)."""
    rows = []
    logprobs = output.get("rollout_logprobs")
    constrained = output.get(CONSTRAINED_KEY) or []
    for i, (p, r, m) in enumerate(zip(output["prompt_token_ids"], output["response_ids"], output["loss_masks"])):
        if logprobs is None and any(m):
            raise ValueError("the rollout returned no logprobs for a trained row; the Tinker backend needs them")
        lp = [float(x) for x in logprobs[i]] if logprobs is not None else [0.0] * len(r)
        flags = [int(x) for x in constrained[i]] if i < len(constrained) and constrained[i] else []
        rows.append(Row(list(p), list(r), [int(x) for x in m], lp, advantages[i], groups[i], flags))
    return Batch(rows, aggregation)


TIS_LOG_CLIP = 20.0
"""|log ratio| beyond this is clipped before exp (SkyRL's ``safe_exp_delta`` clip)."""


def tis_ratios(batch: Batch, trainer_logprobs: list[list[float]], ratio_type: str, *, token_cap: float = 2.0,
               sequence_cap: float = 5.0) -> tuple[list[list[float]], dict[str, float]]:
    """Truncated importance-sampling weights per response token, SkyRL's ``compute_tis_ratio`` semantics.

    ``trainer_logprobs`` are the trainer's (the "old" policy's, before this step's update) over target
    positions; the rows' ``rollout_logprobs`` are the sampler's. ``token``: min(exp(old − rollout), token_cap)
    per token; ``sequence``: min(exp(Σ_masked (old − rollout)), sequence_cap) on every token of the row.
    Masked tokens get their ratio too (it multiplies a zero advantage). Also the share capped."""
    def safe_exp(x: float) -> float:
        return math.exp(max(-TIS_LOG_CLIP, min(TIS_LOG_CLIP, x)))

    out, capped, counted = [], 0, 0
    for row, lp in zip(batch.rows, trainer_logprobs):
        deltas = [0.0 if row.is_constrained(j) else float(lp[row.start + j]) - r
                  for j, r in enumerate(row.rollout_logprobs)]
        if ratio_type == "token":
            ratios = [safe_exp(d) for d in deltas]
            capped += sum(1 for x, m in zip(ratios, row.mask) if m and x > token_cap)
            counted += sum(1 for m in row.mask if m)
            out.append([min(x, token_cap) for x in ratios])
        elif ratio_type == "sequence":
            ratio = safe_exp(sum(d for d, m in zip(deltas, row.mask) if m))
            capped += ratio > sequence_cap
            counted += 1
            out.append([min(ratio, sequence_cap)] * len(deltas))
        else:
            raise ValueError(f"unknown tis_ratio_type {ratio_type!r}: 'token' or 'sequence'")
    key = "tis_token_clip_high_ratio" if ratio_type == "token" else "tis_seq_clip_high_ratio"
    return out, {key: capped / max(counted, 1)}


def reference_logprobs(row: Row, old: list[float] | None, *, everywhere: bool) -> list[float]:
    """The loss's reference logprobs of ``row``: the trainer's (``old``, per target position) everywhere, or only
    where the sampler's were constrained (the sampler's elsewhere); the sampler's when ``old`` is None."""
    if old is None:
        return list(row.rollout_logprobs)
    mine = [float(x) for x in old[row.start:row.start + len(row.mask)]]
    return mine if everywhere else [m if row.is_constrained(j) else r
                                    for j, (m, r) in enumerate(zip(mine, row.rollout_logprobs))]


def datums(batch: Batch, *, with_advantages: bool, old_logprobs: list[list[float]] | None = None,
           token_weights: list[list[float]] | None = None, old_everywhere: bool = True) -> list[Any]:
    """Tinker ``Datum`` s; with ``with_advantages`` also ``logprobs``, ``advantages`` and ``weights`` for a built-in loss.

    The built-in losses of SkyRL's JAX backend reduce as ``(1/B) Σ_b (Σ_t w_bt ℓ_bt) / Σ_t w_bt``
    (``w`` = ``weights``, ``B`` = the sequences sent: a :meth:`Batch.subset` keeps the whole batch's ``c_b``). With ``w`` = the loss mask and the advantage
    of sequence ``b`` sent as ``A_b · c_b · n_b · B`` (``c_b`` the aggregation's factor, ``n_b`` its
    trained tokens), that reduction is exactly ``Σ_b c_b Σ_t m_bt ℓ_bt``: the ``[loss] aggregation``.

    Off-policy correction (``[train] tis_ratio_type``): ``old_logprobs`` (the trainer's, per target position)
    replace the sampler's as the loss's reference, so its ratio is π_θ/π_old, and each token's advantage is
    multiplied by ``token_weights`` (:func:`tis_ratios`): SkyRL's TIS, the truncated π_old/π_sampler factor.
    """
    from tinker import types

    factors = batch.aggregation_factors()
    size = len(batch.rows)
    out = []
    for i, (row, c) in enumerate(zip(batch.rows, factors)):
        seq = row.prompt_ids + row.response_ids
        inputs: dict[str, Any] = {"target_tokens": seq[1:]}
        if with_advantages:
            pad = [0.0] * row.start
            scale = row.advantage * c * sum(row.mask) * size
            reference = reference_logprobs(row, None if old_logprobs is None else old_logprobs[i],
                                           everywhere=old_everywhere)
            weights = token_weights[i] if token_weights is not None else [1.0] * len(row.mask)
            inputs["logprobs"] = pad + reference
            inputs["advantages"] = pad + [scale * m * w for m, w in zip(row.mask, weights)]
            inputs["weights"] = pad + [float(m) for m in row.mask]
        out.append(types.Datum(model_input=types.ModelInput.from_ints(seq[:-1]), loss_fn_inputs=inputs))
    return out


def reduced_loss(data: list[Any], outputs: list[dict[str, Any]]) -> float:
    """The loss a built-in ``forward_backward`` minimised, from its per-token ``elementwise_loss`` (SkyRL's JAX
    server reports no loss metric): the mean over sequences of ``Σ_t ℓ_bt / Σ_t w_bt``."""
    total = 0.0
    for datum, out in zip(data, outputs):
        weights = sum(float(w) for w in datum.loss_fn_inputs["weights"].data)
        total += sum(float(x) for x in out["elementwise_loss"].data) / max(weights, 1e-9)
    return total / max(len(data), 1)


def mismatch(batch: Batch, trainer_logprobs: list[list[float]]) -> dict[str, float | None]:
    """Mean and max |trainer − rollout| logprob over the trained tokens (the guide's Step 2 check), leaving out the
    tokens sampled under a grammar, whose logprobs are the constrained distribution's: their mean gap (the
    grammar's renormalisation, not an error) is ``mismatch_constrained_mean`` with their count. When every trained
    token was constrained the mismatch is None: there is nothing to compare the two programs on."""
    diffs, held = [], []
    for row, lp in zip(batch.rows, trainer_logprobs):
        for j, (m, rollout) in enumerate(zip(row.mask, row.rollout_logprobs)):
            if m:
                (held if row.is_constrained(j) else diffs).append(abs(float(lp[row.start + j]) - rollout))
    if held and not diffs:  # every trained token was constrained: nothing the two programs can be compared on
        return {"mismatch_mean": None, "mismatch_max": None, "mismatch_constrained_mean": mean(held),
                "constrained_tokens": float(len(held))}
    out = {"mismatch_mean": mean(diffs) if diffs else 0.0, "mismatch_max": max(diffs) if diffs else 0.0}
    if held:
        out |= {"mismatch_constrained_mean": mean(held), "constrained_tokens": float(len(held))}
    return out


class TackroomLoss:
    """A tackroom loss as a Tinker custom loss: ``(data, logprobs_list) -> (loss, metrics)``.

    Calls the loss function with SkyRL's signature on ``[rows, response tokens]``
    tensors (the rollout logprobs as both old and behaviour policy: on this
    backend every step samples from the weights it trains), with the
    aggregation done by the loss itself. Remembers the trainer's logprobs for
    :func:`mismatch`.
    """

    def __init__(self, spec: Any, options: Any, batch: Batch) -> None:
        self.fn = spec.load()
        self.options = options
        self.batch = batch
        self.trainer_logprobs: list[list[float]] = []
        self.last_loss: float | None = None

    def __call__(self, data: list[Any], logprobs_list: list[Any]) -> tuple[Any, dict[str, float]]:
        import torch
        from torch.nn.utils.rnn import pad_sequence

        rows = self.batch.rows
        self.trainer_logprobs = [lp.detach().float().tolist() for lp in logprobs_list]
        log_probs = pad_sequence([lp[r.start:r.start + len(r.mask)].float() for lp, r in zip(logprobs_list, rows)],
                                 batch_first=True)
        width = log_probs.shape[1]

        def padded(values: list[list[float]], dtype: Any = torch.float32) -> Any:
            return torch.tensor([v + [0] * (width - len(v)) for v in values], dtype=dtype)

        rollout = padded([r.rollout_logprobs for r in rows])
        if self.batch.has_constrained:  # the trainer's own logprob where the sampler's was constrained
            rollout = torch.where(padded([r.constrained + [0] * (len(r.mask) - len(r.constrained)) for r in rows],
                                         torch.bool), log_probs.detach(), rollout)
        mask = padded([r.mask for r in rows], torch.bool)
        advantages = padded([[r.advantage] * len(r.mask) for r in rows])
        group_ids = torch.tensor([self.batch.group_index[r.group] for r in rows])
        loss, metrics = self.fn(log_probs, rollout, advantages, self.options, mask, rollout,
                                aggregation=self.batch.aggregation, group_ids=group_ids,
                                num_groups=len(self.batch.group_index))
        self.last_loss = float(loss.detach())
        return loss, {k: float(v) for k, v in metrics.items()}
