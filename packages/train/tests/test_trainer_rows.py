"""Which rows of a step reach the trainer (``Batch.for_trainer`` / ``for_mismatch``), and that leaving the
others out changes neither the loss nor its gradient.

Found on the multi-turn terminus run: every row of a 12-trial step went to ``forward_backward`` padded to
1024 tokens, four of them from a group whose rewards were all 0 (advantage 0, no gradient), and one step's
forward_backward took over 6 minutes on this 2-core machine.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tackroom_train.tinker.datums import Batch, Row, aggregation_factors, batch_from_output, datums, reduced_loss


def _batch(aggregation: str):
    # group a: rewards differ (signal); group b: all equal (advantage 0); one masked row in each
    out = {"prompt_token_ids": [[1, 2], [1, 2], [1, 2], [3], [3], [3]],
           "response_ids": [[5, 6, 7], [8], [9, 9], [4, 4], [4], [6, 6, 6]],
           "loss_masks": [[1, 1, 1], [1], [0, 0], [1, 1], [1], [0, 0, 0]],
           "rollout_logprobs": [[-0.1] * 3, [-0.2], [0.0] * 2, [-0.3] * 2, [-0.4], [0.0] * 3]}
    adv = [0.8, -0.8, 0.0, 0.0, 0.0, 0.0]
    return out, adv, ["a", "a", "a", "b", "b", "b"]


def _server_loss(data):
    """SkyRL's JAX reduction of Tinker's importance_sampling on-policy: ℓ = -ratio·A with ratio 1."""
    outputs = [{"elementwise_loss": SimpleNamespace(data=[w * -a for w, a in zip(d.loss_fn_inputs["weights"].data,
                                                                                d.loss_fn_inputs["advantages"].data)])}
               for d in data]
    return reduced_loss(data, outputs)


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean", "prompt_mean"])
def test_the_rows_sent_give_the_whole_batchs_loss(aggregation: str) -> None:
    out, adv, groups = _batch(aggregation)
    batch = batch_from_output(out, adv, groups, aggregation)
    sent = batch.subset(batch.for_trainer(2))
    assert len(sent.rows) == 2  # the two rows with an advantage: a whole micro-batch already
    whole = _server_loss(datums(batch, with_advantages=True))
    part = _server_loss(datums(sent, with_advantages=True))
    c = aggregation_factors(out["loss_masks"], groups, aggregation)
    wanted = sum(-c[b] * adv[b] * sum(out["loss_masks"][b]) for b in range(len(adv)))
    assert whole == pytest.approx(wanted) and part == pytest.approx(wanted)
    # and the per-token advantages (what the gradient is made of) are the whole batch's, token for token
    full = {tuple(d.model_input.to_ints()): d.loss_fn_inputs["advantages"].data
            for d in datums(batch, with_advantages=True)}
    for d in datums(sent, with_advantages=True):
        assert d.loss_fn_inputs["advantages"].data == pytest.approx(
            [x * len(sent.rows) / len(batch.rows) for x in full[tuple(d.model_input.to_ints())]])


def test_rows_are_topped_up_to_whole_micro_batches_trained_rows_first() -> None:
    out, _, groups = _batch("sequence_mean")
    # row 2 has an advantage but no trained token: no gradient either
    batch = batch_from_output(out, [0.8, -0.8, 0.5, 0.0, 0.4, 0.0], groups, "sequence_mean")
    # rows 0, 1, 4 carry the gradient; the row topping up has trained tokens (its mismatch counts): 3, not 2 or 5
    assert batch.for_trainer(2) == [0, 1, 3, 4]
    assert batch.for_trainer(4) == [0, 1, 3, 4]
    assert batch.for_trainer(0) == list(range(6))  # fused batch: every row, one shape per step
    assert len(batch.for_trainer(5)) == 5  # 3 with signal + 2 topping up
    assert batch.for_trainer(100) == list(range(6))  # not enough rows to fill it: all of them


def test_a_step_without_signal_still_measures_the_mismatch_on_one_micro_batch() -> None:
    out, _, groups = _batch("token_mean")
    batch = batch_from_output(out, [0.0] * 6, groups, "token_mean")
    assert not batch.has_signal
    probe = batch.for_mismatch(2)
    assert len(probe) == 2 and all(any(batch.rows[i].mask) for i in probe)
    assert batch.for_mismatch(0) == list(range(6))


def test_a_subset_keeps_the_factors_of_the_whole_batch() -> None:
    rows = [Row([1], [2, 3], [1, 1], [0.0, 0.0], 1.0, "a"), Row([1], [2], [1], [0.0], 0.0, "a")]
    batch = Batch(rows, "sequence_mean")
    assert batch.subset([0]).aggregation_factors() == [pytest.approx(1 / (2 * 2))]
    assert Batch(rows[:1], "sequence_mean").aggregation_factors() == [pytest.approx(1 / 2)]
