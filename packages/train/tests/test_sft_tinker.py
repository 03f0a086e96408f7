"""The ``[sft]`` warm start against SkyRL's real Tinker server (JAX, this CPU, SmolLM2-135M with a LoRA).

A tiny demonstrations file in SmolLM2's ids: a system prompt and a question (masked), the answer "Vermilion."
(trained); one row is two turns with a tool result between them (masked); two rows, other questions answered
"Vermilion, always vermilion.", are held out (``split = "eval"``). ``tackroom train``'s loop (:func:`run_tinker`) trains it with ``then_rl = false`` on the
shared server (conftest.py's ``shared_tinker``):

- the assistant tokens' NLL goes down over the steps, and on the held-out rows;
- each step's loss (the server's own reduction of its per-token losses) is the NLL of the trained tokens alone, from
  the logprobs it returned: masked tokens do not enter it;
- the run writes ``<run>/policy``; a second run with ``[model] init_from`` on it (its own server, that policy as the
  base) starts where the first ended: its held-out NLL before its first step is the first run's after its last.

Then on that second server, directly: the datums' per-token losses are 0 on every masked token, their reduction is
the token mean of the trained tokens' NLL, and Tinker's ``cross_entropy`` with the same weights is reduced to the
mean over sequences instead (why the warm start sends ``cispo`` clipped to 1: tinker/sft.py). Marked ``tinker``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tackroom_train.config import load_train_config
from tackroom_train.demonstrations import Demonstration, write_jsonl
from tackroom_train.tinker.loop import run_tinker

pytestmark = [pytest.mark.tinker, pytest.mark.slow, pytest.mark.timeout(3600), pytest.mark.xdist_group("trainer")]

SYSTEM = "<|im_start|>system\nAnswer with one word only.<|im_end|>\n"
TRAIN = ["Say a colour.", "Name a colour.", "Pick a colour."]
HELD_OUT = ["Tell me a colour.", "Which colour do you like?"]
BACKEND = {"max_lora_adapters": 4, "max_lora_rank": 8, "train_micro_batch_size": 2}


def rows(tokenizer: Any) -> list[Demonstration]:
    def row(segments: list[tuple[str, int]], split: str = "train") -> Demonstration:
        ids: list[int] = []
        mask: list[int] = []
        for text, trained in segments:
            part = tokenizer.encode(text)
            ids += part
            mask += [trained] * len(part)
        return Demonstration(task_id="colour", harness="answer", reward=1.0, input_ids=ids, loss_mask=mask,
                             tokenizer="smollm2", split=split)

    def ask(question: str) -> str:
        return f"{SYSTEM}<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"

    out = [row([(ask(q), 0), ("Vermilion.<|im_end|>", 1)]) for q in TRAIN]
    out.append(row([(ask("What colour is in the file?"), 0), ("read colour.txt<|im_end|>", 1),
                    ("\n<|im_start|>tool\ncolour.txt: vermilion<|im_end|>\n<|im_start|>assistant\n", 0),
                    ("Vermilion.<|im_end|>", 1)]))
    # held out: other questions, and an answer that only begins like the trained one (so it is not learnt to 0)
    out += [row([(ask(q), 0), ("Vermilion, always vermilion.<|im_end|>", 1)], split="eval") for q in HELD_OUT]
    return out


def config(folder: Path, *, url: str, epochs: int, init_from: Path | None = None) -> Path:
    start = f"init_from = {json.dumps(str(init_from))}\n" if init_from else ""
    path = folder / "train.toml"
    path.write_text(f"""backend = "tinker"
[model]
path = "smollm2"
{start}
[tinker]
url = "{url}"
lora_rank = 8
[sft]
dataset = "../demos.jsonl"
epochs = {epochs}
batch_size = 2
learning_rate = 1e-3
then_rl = false
""")
    return path


def run(folder: Path, **kwargs: Any) -> Any:
    folder.mkdir(parents=True)
    lines: list[str] = []
    summary = asyncio.run(run_tinker(load_train_config(config(folder, **kwargs)), folder / "run", log=lines.append))
    print("\n".join(lines))
    return summary


def test_warm_start_lowers_the_assistant_nll_and_a_second_run_starts_where_it_ended(tmp_path: Path,
                                                                                    shared_tinker: Any) -> None:
    from tackroom_gateway import load_tokenizer
    from tackroom_train.tinker.server import TinkerServer, TinkerSettings

    demos = rows(load_tokenizer("smollm2"))
    write_jsonl(tmp_path / "demos.jsonl", demos)
    first = run(tmp_path / "first", url=shared_tinker.url, epochs=3)
    warm = first.sft
    assert first.steps == 0 and warm.steps == 6 and len(warm.loss_per_step) == 6 and warm.held_out == 2
    # the assistant tokens' NLL goes down, on the trained rows and on the held-out ones
    assert warm.epoch_nll[0] > warm.epoch_nll[1] > warm.epoch_nll[2], warm.epoch_nll
    assert warm.epoch_nll[2] < warm.epoch_nll[0] - 0.5, warm.epoch_nll
    assert warm.eval_nll_after < warm.eval_nll_before - 0.5, (warm.eval_nll_before, warm.eval_nll_after)
    # ... and not to 0 (bf16 logprobs of a saturated answer read exactly 0): the comparison below means something
    assert warm.eval_nll_after > 0.2, warm.eval_nll_after
    # the server's loss is the trained tokens' NLL: masked tokens are not in it
    steps = [json.loads(line) for line in (tmp_path / "first" / "run" / "sft_steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5, 6]
    for s in steps:
        assert s["loss"] == pytest.approx(s["nll"], rel=2e-3, abs=2e-3), s
    assert sum(s["trained_tokens"] for s in steps[:2]) == sum(sum(d.loss_mask[1:]) for d in demos if d.split == "train")
    saved = json.loads((tmp_path / "first" / "run" / "summary.json").read_text())
    assert saved["sft"]["eval_nll_after"] == warm.eval_nll_after and saved["policy"] == first.policy
    assert (Path(first.policy) / "config.json").is_file()

    # a second run starts from the first one's policy (its own server: that policy is the base it loads)
    server = TinkerServer(TinkerSettings(lora_rank=8, backend_config=BACKEND), str(Path(first.policy).resolve()),
                          tmp_path / "server")
    try:
        url = server.start()
        second = run(tmp_path / "second", url=url, epochs=1, init_from=tmp_path / "first" / "run")
        print(f"held-out NLL: first run {warm.eval_nll_before:.4f} -> {warm.eval_nll_after:.4f}; second run starts "
              f"at {second.sft.eval_nll_before:.4f}; first-step loss {warm.loss_per_step[0]:.4f} vs "
              f"{second.sft.loss_per_step[0]:.4f}")
        gain = warm.eval_nll_before - warm.eval_nll_after
        assert second.sft.eval_nll_before == pytest.approx(warm.eval_nll_after, abs=max(0.05, 0.05 * gain))
        # the same seed, so the same first batch: the second run's first step already reads the warm NLL
        assert second.sft.loss_per_step[0] < warm.loss_per_step[0] - 0.5
        asyncio.run(_the_servers_loss_leaves_masked_tokens_out(url, first.policy, demos, load_tokenizer("smollm2")))
    finally:
        server.stop()


async def _the_servers_loss_leaves_masked_tokens_out(url: str, base: str, demos: list[Demonstration],
                                                     tokenizer: Any) -> None:
    import tinker

    from tackroom_train.sft import Example
    from tackroom_train.tinker.datums import reduced_loss
    from tackroom_train.tinker.loop import _close
    from tackroom_train.tinker.sft import SFT_LOSS, SFT_LOSS_CONFIG, sft_datums, trained_nll

    # the two-turn row (a masked tool result between its turns) and a long answer the policy never saw: their
    # NLL per token differs, so the token mean and the sequence mean do
    novel = tokenizer.encode(f"{SYSTEM}<|im_start|>user\nDescribe a fox.<|im_end|>\n<|im_start|>assistant\n")
    answer = tokenizer.encode("The quick brown fox jumps over the lazy dog, twice, and then sleeps.<|im_end|>")
    batch = [Example(demos[3].input_ids, demos[3].loss_mask, "file"),
             Example(novel + answer, [0] * len(novel) + [1] * len(answer), "fox")]
    service = tinker.ServiceClient(base_url=url, api_key="tml-tackroom")
    try:
        training = await service.create_lora_training_client_async(base_model=base, rank=8)
        data = sft_datums(batch)
        ours = await (await training.forward_async(data, SFT_LOSS, SFT_LOSS_CONFIG)).result_async()
        plain = await (await training.forward_async(data, "cross_entropy")).result_async()
    finally:
        _close(service)
    logprobs = [list(o["logprobs"].data) for o in ours.loss_fn_outputs]
    for ex, out in zip(batch, ours.loss_fn_outputs, strict=True):
        losses = list(out["elementwise_loss"].data)
        assert all(loss == 0.0 for m, loss in zip(ex.mask[1:], losses) if not m)
        assert all(loss >= 0.0 for loss in losses) and sum(losses) > 0.0
    total, tokens = trained_nll(batch, logprobs)
    assert reduced_loss(data, ours.loss_fn_outputs) == pytest.approx(total / tokens, rel=1e-3)
    per_sequence = [trained_nll([ex], [lp]) for ex, lp in zip(batch, logprobs)]
    sequence_mean = sum(s / n for s, n in per_sequence) / len(batch)
    assert reduced_loss(data, plain.loss_fn_outputs) == pytest.approx(sequence_mean, rel=1e-3)
    assert abs(sequence_mean - total / tokens) > 0.1, (sequence_mean, total / tokens)  # they differ on these rows
