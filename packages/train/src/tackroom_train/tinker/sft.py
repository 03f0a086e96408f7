"""The ``[sft]`` warm start on the Tinker backend: cross-entropy on the demonstrations' trained tokens, on the run's
LoRA, before RL (or instead of it).

Each step sends one batch of demonstrations (:func:`~tackroom_train.sft.epoch_batches`) as Tinker ``Datum`` s
(:func:`sft_datums`) to ``forward_backward``, then ``optim_step`` (Adam at ``[sft] learning_rate``).

**The loss and its reduction.** The objective is the mean NLL over every trained token of the step's batch
(``token_mean``): ``L = (1/N) Σ_b Σ_t m_bt · (−log p(x_bt | x_<t))``, ``m`` the loss mask (0 on prompts, tool
results and harness text; the first token is never a target), ``N = Σ m``. Tinker's ``cross_entropy`` with
``weights = m`` is that sum on a server that adds its weighted losses up, but SkyRL 0.4's JAX server divides each
sequence's weighted loss by that sequence's weight sum, then averages the sequences (``skyrl/backends/jax.py``:
``per_seq_loss = Σ_t ℓ_t / Σ_t w_t``, gradients summed and divided by the sequence count): weights there give the
*sequence* mean whatever their scale, and a 200-token demonstration would weigh as much as a 20-token one. So the
step is sent as Tinker's ``cispo`` with both clip thresholds at 1: its loss is ``−w_t · clip(ratio, 1, 1) ·
A_t · log p_t = −w_t · A_t · log p_t`` (the clipped ratio is the constant 1, no gradient), a weighted cross-entropy
whose per-token factor ``A`` the server does not renormalise. With ``w = m`` and ``A_bt = m_bt · n_b · B / N``
(``n_b`` the sequence's trained tokens, ``B`` the sequences sent) the server's reduction is exactly ``L``; the RL
datums carry their aggregation the same way (:func:`~.datums.datums`). The logprobs it returns are those of the
weights before the update, so each step's ``nll`` (from them, over the trained tokens) equals its ``loss`` (the
server's own reduction of its per-token losses): masked tokens add nothing to either.

**What it reports.** Per step the loss, the trained tokens and the demonstrations (the step's line,
``<run>/sft_steps.jsonl``, the ``[train] trackers`` as ``sft/*`` and the progress bar); per epoch the mean NLL per
trained token over its steps (each measured before that step's update); with held-out rows (``split = "eval"``)
their mean NLL per token before the first step and after the last (a ``forward``, no gradient). The whole is
:class:`SftReport`, in ``<run>/sft.json`` and the run's ``summary.json``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel

from tackroom_train.sft import Example, SftPlan, epoch_batches
from tackroom_train.tinker.client import TrainingClient
from tackroom_train.tinker.datums import reduced_loss
from tackroom_train.tracking import TrackerSet

SFT_LOSS = "cispo"
SFT_LOSS_CONFIG = {"clip_low_threshold": 1.0, "clip_high_threshold": 1.0}
"""The built-in and config that make Tinker's ``cispo`` the weighted cross-entropy (see the module docstring)."""


def sft_datums(batch: list[Example]) -> list[Any]:
    """The batch as Tinker ``Datum`` s whose server-side reduction is the token-mean cross-entropy: targets are the
    ids from the second on, ``weights`` the loss mask, ``advantages`` the mask × ``n_b · B / N``; 0 on every
    masked token."""
    from tinker import types

    counts = [ex.trained_tokens for ex in batch]
    total, size = sum(counts), len(batch)
    out = []
    for ex, n in zip(batch, counts):
        weights = [float(m) for m in ex.mask[1:]]
        scale = n * size / total
        inputs = {"target_tokens": ex.ids[1:], "weights": weights, "advantages": [w * scale for w in weights],
                  "logprobs": [0.0] * len(weights)}
        out.append(types.Datum(model_input=types.ModelInput.from_ints(ex.ids[:-1]), loss_fn_inputs=inputs))
    return out


def forward_datums(batch: list[Example]) -> list[Any]:
    """The batch for a ``forward`` (no gradient): the targets and the mask as weights."""
    from tinker import types

    return [types.Datum(model_input=types.ModelInput.from_ints(ex.ids[:-1]),
                        loss_fn_inputs={"target_tokens": ex.ids[1:], "weights": [float(m) for m in ex.mask[1:]]})
            for ex in batch]


def trained_nll(batch: list[Example], logprobs: list[list[float]]) -> tuple[float, int]:
    """The summed NLL of the batch's trained tokens (``logprobs`` per target position) and their count."""
    total, tokens = 0.0, 0
    for ex, lp in zip(batch, logprobs):
        for m, value in zip(ex.mask[1:], lp):
            if m:
                total -= float(value)
                tokens += 1
    return total, tokens


class SftStepRecord(BaseModel):
    """One warm-start step (a line of ``<run>/sft_steps.jsonl``)."""

    step: int
    epoch: int
    loss: float
    """The server's reduction of its per-token losses: the mean NLL per trained token of the batch."""
    nll: float
    """The same from the logprobs it returned (the weights before the update), over the trained tokens only."""
    trained_tokens: int
    demonstrations: int
    train_s: float

    def metrics(self) -> dict[str, float]:
        """The step as the trackers get it."""
        return {"sft/loss": self.loss, "sft/nll": self.nll, "sft/trained_tokens": float(self.trained_tokens),
                "sft/demonstrations": float(self.demonstrations), "sft/epoch": float(self.epoch),
                "time/sft_step_s": self.train_s}


class SftReport(BaseModel):
    """What the warm start did (``<run>/sft.json``; ``summary.json``'s ``sft``)."""

    dataset: str
    demonstrations: int
    held_out: int
    truncated: int
    dropped: int
    epochs: int
    steps: int
    batch_size: int
    learning_rate: float
    loss_per_step: list[float] = []
    trained_tokens_per_step: list[int] = []
    epoch_nll: list[float] = []
    """Per epoch: the mean NLL per trained token over its steps, each measured before its step's update."""
    eval_nll_before: float | None = None
    """The held-out rows' mean NLL per trained token before the first step (None: no ``split = "eval"`` rows)."""
    eval_nll_after: float | None = None
    eval_tokens: int = 0
    then_rl: bool = True
    seconds: float = 0.0


async def held_out_nll(plan: SftPlan, client: TrainingClient, when: str) -> tuple[float | None, int]:
    """The held-out rows' mean NLL per trained token under the current weights (a ``forward`` per ``batch_size``
    rows), and their trained tokens; (None, 0) without held-out rows."""
    total, tokens, size = 0.0, 0, plan.settings.batch_size
    for k in range(0, len(plan.held_out), size):
        chunk = plan.held_out[k:k + size]
        logprobs = await client.forward(forward_datums(chunk), f"sft: held-out NLL {when}")
        part, n = trained_nll(chunk, logprobs)
        total, tokens = total + part, tokens + n
    return (total / tokens if tokens else None), tokens


async def sft_step(client: TrainingClient, batch: list[Example], *, step: int, epoch: int,
                   learning_rate: float) -> SftStepRecord:
    """One forward-backward of the batch's token-mean cross-entropy, then Adam's step."""
    t0 = time.monotonic()
    data = sft_datums(batch)
    result = await client.forward_backward(data, SFT_LOSS, SFT_LOSS_CONFIG, f"sft step {step}: forward_backward")
    await client.optim_step(learning_rate, f"sft step {step}: optim_step")
    total, tokens = trained_nll(batch, TrainingClient.logprobs(result))
    return SftStepRecord(step=step, epoch=epoch, loss=reduced_loss(data, result.loss_fn_outputs),
                         nll=total / tokens, trained_tokens=tokens, demonstrations=len(batch),
                         train_s=time.monotonic() - t0)


async def warm_start(plan: SftPlan, client: TrainingClient, *, seed: int, run_dir: Path,
                     log: Callable[[str], None], trackers: TrackerSet) -> SftReport:
    """Train the warm start on ``client``'s LoRA (blocks until done): every epoch's steps, the held-out NLL before
    and after; each step logged and tracked at steps 1..S, after which ``trackers.offset`` is S so the run's next
    phase logs above it."""
    s = plan.settings
    t0 = time.monotonic()
    report = SftReport(dataset=str(plan.dataset), demonstrations=len(plan.train), held_out=len(plan.held_out),
                       truncated=plan.truncated, dropped=plan.dropped, epochs=s.epochs, steps=plan.steps_total,
                       batch_size=s.batch_size, learning_rate=s.learning_rate, then_rl=s.then_rl)
    log(plan.describe())
    trackers.start(plan.steps_total, phase="sft")
    report.eval_nll_before, report.eval_tokens = await held_out_nll(plan, client, "before")
    if report.eval_nll_before is not None:
        log(f"sft: held-out mean NLL {report.eval_nll_before:.4f} per token before the warm start "
            f"({len(plan.held_out)} demonstrations, {report.eval_tokens} trained tokens)")
        trackers.log({"sft/eval_nll": report.eval_nll_before}, 0)
    steps_path = run_dir / "sft_steps.jsonl"
    step = 0
    for epoch in range(1, s.epochs + 1):
        total, tokens = 0.0, 0
        batches = epoch_batches(plan, epoch - 1, seed)
        for k, batch in enumerate(batches, 1):
            step += 1
            record = await sft_step(client, batch, step=step, epoch=epoch, learning_rate=s.learning_rate)
            report.loss_per_step.append(record.loss)
            report.trained_tokens_per_step.append(record.trained_tokens)
            total, tokens = total + record.nll * record.trained_tokens, tokens + record.trained_tokens
            metrics = record.metrics()
            log(f"sft step {step}/{plan.steps_total} (epoch {epoch}/{s.epochs}): loss {record.loss:.4f} "
                f"(mean NLL per trained token), {record.trained_tokens} trained tokens in {record.demonstrations} "
                f"demonstrations  [{record.train_s:.0f}s]")
            with steps_path.open("a") as fh:
                fh.write(record.model_dump_json() + "\n")
            if k == len(batches):
                report.epoch_nll.append(total / tokens)
                metrics["sft/epoch_nll"] = total / tokens
                log(f"sft epoch {epoch}/{s.epochs}: mean NLL {total / tokens:.4f} per trained token over "
                    f"{tokens} tokens")
            if step == plan.steps_total:
                await _after(plan, client, report, metrics, log)
            trackers.log(metrics, step)
    trackers.offset = step
    report.seconds = time.monotonic() - t0
    (run_dir / "sft.json").write_text(report.model_dump_json(indent=2))
    return report


async def _after(plan: SftPlan, client: TrainingClient, report: SftReport, metrics: dict[str, float],
                 log: Callable[[str], None]) -> None:
    """The held-out NLL after the last step, into the report and the last step's metrics."""
    report.eval_nll_after, _ = await held_out_nll(plan, client, "after")
    if report.eval_nll_after is None or report.eval_nll_before is None:
        return
    metrics["sft/eval_nll"] = report.eval_nll_after
    log(f"sft: held-out mean NLL {report.eval_nll_before:.4f} → {report.eval_nll_after:.4f} per token")
