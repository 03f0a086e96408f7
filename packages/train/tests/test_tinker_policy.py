"""The merged policy computes what SkyRL's Tinker trainer computes (SmolLM2-135M, a real JAX server on this CPU).

A LoRA is trained a few steps on one answer until the model's logprobs move far (nats) from the base
model's; the server saves it as the run's final sampler checkpoint; :func:`export_policy` merges it
into SmolLM2. The trainer's own forward pass (``forward``, cross-entropy) gives per-token logprobs of
the trained answer and of an unrelated text, before and after training; the merged folder loaded by
transformers (CPU, float32 compute over the bf16 weights) must match the trained ones as closely as
transformers matches JAX on the *base* model (two implementations of a bf16 model never agree
exactly: ~0.07 nats a token here), and a merge at another scale must be further off (several times
at 0.5× or 2×), which pins the key mapping, the B·A orientation and the scale (alpha/rank, SkyRL's definition).
The same checkpoint downloaded through the Tinker SDK's archive URL (how a run with ``[tinker] url``
gets it) is the same bytes. The server is the trainer tests' shared one (``shared_tinker`` in conftest.py); the
LoRA is this test's own. Marked ``tinker``: about 2 minutes here.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.tinker, pytest.mark.slow, pytest.mark.timeout(1800)]


def _logprobs(model, ids: list[int]) -> list[float]:
    """log p(ids[t] | ids[:t]) for t ≥ 1, as Tinker's cross-entropy forward reports them (model_input = ids[:-1])."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids[:-1]])).logits[0].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()


def test_the_merged_policy_equals_the_tinker_trainer(tmp_path: Path, shared_tinker) -> None:
    import tinker
    import torch
    import transformers
    from tinker import types

    from tackroom_train.tinker import policy
    from tackroom_train.tinker.loop import _close as close_service

    base = shared_tinker.base
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(base))
    prompt = tokenizer.encode("<|im_start|>user\nSay a colour.<|im_end|>\n<|im_start|>assistant\n")
    answer = tokenizer.encode("Vermilion, always vermilion.<|im_end|>")
    trained = prompt + answer
    other = tokenizer.encode("The quick brown fox jumps over the lazy dog, and the colour of the sky is blue.")

    def datum(ids: list[int], weights: list[float]) -> types.Datum:
        return types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                           loss_fn_inputs={"target_tokens": ids[1:], "weights": weights})

    answer_weights = [0.0] * (len(prompt) - 1) + [1.0] * len(answer)
    timings: dict[str, float] = {}

    services: list = []

    async def train_and_read() -> tuple[str, list[list[float]], list[list[float]], policy.PolicyFolder, bytes]:
        timings["server start (shared)"] = shared_tinker.start_s
        service = tinker.ServiceClient(base_url=shared_tinker.url, api_key="tml-tackroom")
        services.append(service)
        training = await service.create_lora_training_client_async(base_model=str(base), rank=8)

        async def forward() -> list[list[float]]:
            data = [datum(ids, [1.0] * (len(ids) - 1)) for ids in (trained, other)]
            out = await (await training.forward_async(data, "cross_entropy")).result_async()
            return [list(o["logprobs"].data) for o in out.loss_fn_outputs]

        before = await forward()  # a fresh LoRA has B = 0: the base model, as JAX computes it
        t0 = time.monotonic()
        for _ in range(4):
            await (await training.forward_backward_async([datum(trained, answer_weights)], "cross_entropy")).result_async()
            await (await training.optim_step_async(types.AdamParams(learning_rate=3e-3))).result_async()
        timings["4 train steps"] = time.monotonic() - t0
        saved = await (await training.save_weights_for_sampler_async(name="final")).result_async()
        after = await forward()
        t0 = time.monotonic()
        folder = await policy.export_policy(saved.path, tmp_path / "run", base, checkpoints=shared_tinker.checkpoints,
                                            chat_template="{{ messages }}")
        timings["export"] = time.monotonic() - t0
        download = tmp_path / "download"
        download.mkdir()
        fetched = await policy.download_archive(service, saved.path, download / "final.tar.gz")
        return saved.path, before, after, folder, fetched.read_bytes()

    try:
        path, jax_base, jax_trained, folder, downloaded = asyncio.run(train_and_read())
    finally:  # its session heartbeat would outlive the shared server, printing "Tinker is down" every 10 s
        for service in services:
            close_service(service)
    print(json.dumps({k: round(v, 1) for k, v in timings.items()}))

    assert downloaded == policy.sampler_archive(shared_tinker.checkpoints, path).read_bytes()
    assert (folder.rank, folder.alpha, folder.scale) == (8, 32.0, 4.0), "SkyRL's server: alpha 32, scale alpha/rank"
    assert folder.merged_modules == 30 * 7 and folder.dtype == "bfloat16"
    assert json.loads((tmp_path / "run" / "policy" / policy.PROVENANCE).read_text())["checkpoint"] == path
    # another name (a run's warm start): its own folders beside the policy's, which stay as they were
    policy_files = {f.name: f.stat().st_mtime_ns for f in (tmp_path / "run" / "policy").iterdir()}
    warm = asyncio.run(policy.export_policy(path, tmp_path / "run", base, checkpoints=shared_tinker.checkpoints,
                                            name="warm-policy"))
    assert Path(warm.path) == tmp_path / "run" / "warm-policy" and (Path(warm.path) / "model.safetensors").is_file()
    assert Path(warm.adapter) == tmp_path / "run" / "warm-policy-adapter"
    assert {f.name: f.stat().st_mtime_ns for f in (tmp_path / "run" / "policy").iterdir()} == policy_files

    def gaps(folder_: Path, reference: list[list[float]]) -> list[float]:
        """Mean |transformers − JAX| logprob per token, on the trained text and on the other."""
        model = transformers.AutoModelForCausalLM.from_pretrained(str(folder_), dtype=torch.float32).eval()
        out = []
        for ids, ref in zip((trained, other), reference, strict=True):
            ours = _logprobs(model, ids)
            out.append(sum(abs(p - q) for p, q in zip(ours, ref, strict=True)) / len(ref))
        return out

    moved = [sum(abs(p - q) for p, q in zip(x, y)) / len(x) for x, y in zip(jax_base, jax_trained)]
    floor = gaps(base, jax_base)  # transformers vs JAX on the same (base) weights: the comparison's noise
    merged = gaps(tmp_path / "run" / "policy", jax_trained)
    adapter_config = tmp_path / "run" / "adapter" / "adapter_config.json"
    config = json.loads(adapter_config.read_text())
    off = {}
    for factor in (0.5, 0.9, 1.1, 2.0):
        adapter_config.write_text(json.dumps({**config, "lora_alpha": config["lora_alpha"] * factor}))
        policy.merge_lora(base, tmp_path / "run" / "adapter", tmp_path / f"x{factor}")
        off[factor] = gaps(tmp_path / f"x{factor}", jax_trained)
    print(f"mean |Δ logprob| per token (trained text, other text): training moved JAX by {moved}; "
          f"transformers vs JAX, base {floor}; merged policy vs trained JAX {merged}; merged at another scale: "
          + ", ".join(f"{f}× {g}" for f, g in off.items()))
    # the LoRA moved the model by nats a token, on the answer and on the rest ...
    assert min(moved) > 0.5
    # ... the merged folder follows the trainer about as closely as transformers follows JAX on the base ...
    for ours, noise in zip(merged, floor):
        assert ours < 3 * noise + 0.05, (merged, floor)
    # ... and another scale is worse, by far when off by 2× (alpha/rank is the scale; the others are what one gets
    # from forgetting alpha, or the rank, or rsLoRA's sqrt: factors of 2 and more here)
    # (measured over both texts together: on one text alone, off by 10% came within the noise once, 1.42×, and off
    # by 2× once reached only 2.76× on the trained text, whose merged gap was 0.20 under a loaded CI, while
    # both texts together stayed 6×)
    for factor, wrong in off.items():
        if factor in (0.5, 2.0):
            assert sum(wrong) / sum(merged) > 3, (off, merged)
        else:
            assert sum(wrong) / sum(merged) > 1.5, (off, merged)
