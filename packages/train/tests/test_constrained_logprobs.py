"""Turns sampled under a grammar (archipelago's forced tool calls: vLLM structured outputs) carry the constrained
distribution's logprobs (a forced token reads 0.0, up to 15 nats from the model's own, measured in the lookup run);
the trainer cannot reproduce them. Marked per turn (``TokenTurn.logprobs_constrained``), those tokens take the
trainer's own logprob as the loss's reference and stay out of the mismatch, which reports them apart."""

from __future__ import annotations

import math

import pytest
import torch

from tackroom import TokenTurn, Trajectory
from tackroom_app import get_plugin_manager
from tackroom_train.generator import constrained_tokens, split_tokens
from tackroom_train.tinker.datums import (
    CONSTRAINED_KEY,
    TackroomLoss,
    batch_from_output,
    datums,
    mismatch,
    reference_logprobs,
    tis_ratios,
)

# one row: prompt [1, 2], then a constrained tool call [7, 8] (0.0 = forced), an observation [4], a free turn [9]
OUT = {"prompt_token_ids": [[1, 2]], "response_ids": [[7, 8, 4, 9]], "loss_masks": [[1, 1, 0, 1]],
       "rollout_logprobs": [[0.0, -0.2, 0.0, -0.5]], CONSTRAINED_KEY: [[1, 1, 0, 0]]}
TRAINER = [[9.0, -6.0, -0.3, -7.0, -0.55]]  # target positions: the response starts at 1


def _batch():
    return batch_from_output(OUT, [1.0], ["a"], "token_mean")


def test_the_generator_marks_the_tokens_of_constrained_turns_only() -> None:
    forced = TokenTurn(prompt_ids=[1, 2], completion_ids=[7, 8], logprobs=[0.0, -0.2], logprobs_constrained=True)
    free = TokenTurn(prompt_ids=[1, 2, 7, 8, 4], completion_ids=[9], logprobs=[-0.5])
    traj = Trajectory(messages=[], turns=[forced, free], token_ids=[1, 2, 7, 8, 4, 9], loss_mask=[0, 0, 1, 1, 0, 1],
                      logprobs=[0.0, 0.0, 0.0, -0.2, 0.0, -0.5])
    prompt, response, _, _ = split_tokens(traj)
    assert constrained_tokens(traj, len(prompt), len(response)) == [1, 1, 0, 0]
    # a constrained turn of an earlier segment (summarised away) is not in the trained sequence
    old = TokenTurn(prompt_ids=[5], completion_ids=[6], logprobs=[0.0], logprobs_constrained=True, branch=0)
    later = free.model_copy(update={"branch": 1})
    traj2 = traj.model_copy(update={"turns": [old, later]})
    assert constrained_tokens(traj2, len(prompt), len(response)) == [0, 0, 0, 0]


def test_the_mismatch_leaves_constrained_tokens_out_and_reports_them_apart() -> None:
    m = mismatch(_batch(), TRAINER)
    assert m["mismatch_mean"] == pytest.approx(0.05)  # the free token only: |-0.55 - (-0.5)|
    assert m["mismatch_constrained_mean"] == pytest.approx((6.0 + 0.1) / 2) and m["constrained_tokens"] == 2
    plain = dict(OUT)
    plain.pop(CONSTRAINED_KEY)
    unmarked = mismatch(batch_from_output(plain, [1.0], ["a"], "token_mean"), TRAINER)
    assert unmarked["mismatch_mean"] == pytest.approx((6.0 + 0.1 + 0.05) / 3) and "constrained_tokens" not in unmarked
    every = dict(OUT, **{CONSTRAINED_KEY: [[1, 1, 0, 1]]})  # every trained token constrained: nothing to compare
    m = mismatch(batch_from_output(every, [1.0], ["a"], "token_mean"), TRAINER)
    assert m["mismatch_mean"] is None and m["mismatch_max"] is None and m["constrained_tokens"] == 3


def test_the_trainers_own_logprob_is_the_reference_where_the_samplers_was_constrained() -> None:
    row = _batch().rows[0]
    assert reference_logprobs(row, TRAINER[0], everywhere=False) == pytest.approx([-6.0, -0.3, 0.0, -0.5])
    assert reference_logprobs(row, TRAINER[0], everywhere=True) == pytest.approx([-6.0, -0.3, -7.0, -0.55])
    assert reference_logprobs(row, None, everywhere=False) == [0.0, -0.2, 0.0, -0.5]
    data = datums(_batch(), with_advantages=True, old_logprobs=TRAINER, old_everywhere=False)
    assert list(data[0].loss_fn_inputs["logprobs"].data)[1:] == pytest.approx([-6.0, -0.3, 0.0, -0.5])
    # TIS: a constrained token's ratio is 1 (the sampler's number says nothing about the policy)
    ratios, _ = tis_ratios(_batch(), TRAINER, "token", token_cap=2.0)
    assert ratios[0][:2] == [1.0, 1.0] and ratios[0][3] == pytest.approx(min(math.exp(-0.05), 2.0))


def test_the_custom_loss_takes_the_trainers_logprob_on_constrained_tokens() -> None:
    spec = get_plugin_manager().get("loss", "dppo")
    batch = _batch()
    full = [torch.tensor(TRAINER[0], requires_grad=True)]
    loss, _ = TackroomLoss(spec, spec.Options(), batch)(datums(batch, with_advantages=False), full)
    lp = torch.tensor([[-6.0, -0.3, -7.0, -0.55]])
    reference = torch.tensor([[-6.0, -0.3, 0.0, -0.5]])  # the trainer's on the two constrained tokens
    mask = torch.tensor([[1, 1, 0, 1]], dtype=torch.bool)
    direct, _ = spec.load()(lp, reference, torch.ones(1, 4), spec.Options(), mask, reference,
                            aggregation="token_mean", group_ids=torch.tensor([0]), num_groups=1)
    assert loss.item() == pytest.approx(direct.item(), rel=1e-5)


def test_a_step_with_only_constrained_tokens_measures_the_mismatch_on_a_free_sample() -> None:
    """Every trained token constrained: the engine completes the first trained prompt freely with the batch's
    version, the trainer scores those ids before its optimiser step, and that is the step's mismatch."""
    import asyncio

    from tackroom_train.tinker.step_trainer import StepTrainer

    class Client:
        forwards: list = []

        async def forward(self, data, what):
            Client.forwards.append((len(data), what))
            return [[0.0, -0.45, -1.2, -0.3]] * len(data)  # target positions: the sample starts at 1

    asked = []

    async def free_sample(version, prompt):
        asked.append((version, prompt))
        return [5, 6, 7], [-0.5, -1.0, -0.3]

    trainer = StepTrainer(Client(), None, aggregation="token_mean", learning_rate=1e-3, normalize_advantages=True,
                          micro_batch=2)
    every = dict(OUT, **{CONSTRAINED_KEY: [[1, 1, 0, 1]]})
    batch = batch_from_output(every, [1.0], ["a"], "token_mean")
    assert asyncio.run(trainer.free_mismatch(batch, 3, 0, 1)) is None  # no engine: nothing to measure on
    trainer.free_sample = free_sample
    m = asyncio.run(trainer.free_mismatch(batch, 3, 0, 1))
    assert asked == [(3, [1, 2])] and Client.forwards == [(2, "step 1: forward (free sample)")]  # one micro-batch
    assert m["mismatch_mean"] == pytest.approx((0.05 + 0.2 + 0.0) / 3) and m["mismatch_max"] == pytest.approx(0.2)
    # a step with free tokens, or one behind the engine's version, measures on its own tokens
    from tackroom_train.tinker.step_trainer import LossOutcome

    asked.clear()
    own = asyncio.run(trainer.measure(LossOutcome(None, _batch(), TRAINER), 3, 0, 1))
    assert own["mismatch_mean"] == pytest.approx(0.05) and "free_sample" not in own and asked == []
    assert asyncio.run(trainer.free_mismatch(batch, 3, 1, 1)) is None
    stale = asyncio.run(trainer.measure(LossOutcome(None, batch, [[0.0] * 5]), 3, 1, 1))
    assert stale["mismatch_mean"] is None and asked == []
    fresh = asyncio.run(trainer.measure(LossOutcome(None, batch, [[0.0] * 5]), 3, 0, 1))
    assert fresh["free_sample"] is True and fresh["mismatch_mean"] == pytest.approx(m["mismatch_mean"])


@pytest.mark.parametrize("answer,error", [
    ({"choices": [{"token_ids": [5, 6], "logprobs": {"token_logprobs": [-0.5, -1.0]}}]}, None),
    ({"error": "adapter gone"}, "free sample for the mismatch failed"),
    ({"choices": [{"token_ids": [5, 6], "logprobs": {"token_logprobs": [-0.5]}}]}, "2 ids and 1 logprobs"),
])
def test_the_engines_free_sample_asks_the_versions_adapter_without_a_grammar(tmp_path, answer, error) -> None:
    import asyncio
    import json

    import httpx

    from tackroom_train.tinker.engine_sampling import EngineSampling, EngineSamplingError

    sent = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200 if "choices" in answer else 404, json=answer)

    engine = EngineSampling(tmp_path / "run", "m", engine_url="http://engine")
    engine.adapters = {2: "run-v2"}
    engine._client = httpx.AsyncClient(transport=httpx.MockTransport(handle))
    if error is None:
        assert asyncio.run(engine.free_sample(2, [1, 2, 3])) == ([5, 6], [-0.5, -1.0])
    else:
        with pytest.raises(EngineSamplingError, match=error):
            asyncio.run(engine.free_sample(2, [1, 2, 3]))
    assert sent[0]["model"] == "run-v2" and sent[0]["prompt"] == [1, 2, 3]
    assert "structured_outputs" not in sent[0] and sent[0]["temperature"] == 1.0
    with pytest.raises(EngineSamplingError, match="version 7 is not loaded"):
        asyncio.run(engine.free_sample(7, [1]))
