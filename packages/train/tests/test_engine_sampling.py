"""Engine-side sampling with the live LoRA, for real: SkyRL's Tinker trainer (JAX, CPU; the trainer tests' shared
server, ``shared_tinker`` in conftest.py) trains a fresh LoRA one step and the run's own vLLM engine (port 8013 or the next free one, never the shared 8011) samples with it.

* version 0 (the fresh LoRA) is loaded into the engine; the engine's logprobs of a fixed answer are taken
  through the run's proxy (pinned to version 0);
* one optimiser step at lr 1e-2 on that answer, then the hand-off (save, unpack to ``<run>/lora/v1``, load);
* pinned to version 1, the engine's logprobs of the same answer moved by more than half a nat a token, and
  they match the trainer's own forward pass of version 1 (the mismatch check), while version 0 is still
  the base model (the engine's base model answers the same as adapter v0);
* the engine killed: the proxy's next request fails and :meth:`check` raises EngineSamplingError.

Marked ``tinker`` and ``slow``: a JAX server and a vLLM engine start (9 minutes on this 2-core machine at load
average ~20; measured: shift 2.01 nats a token, engine vs trainer at version 1 0.048, hand-off 4.1 s).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.tinker, pytest.mark.slow, pytest.mark.timeout(1800)]


async def _engine_logprobs(proxy_url: str, ids: list[int], start: int) -> list[float]:
    """log p(ids[t] | ids[:t]) for t ≥ start, from the engine through the proxy (prompt logprobs)."""
    async with httpx.AsyncClient(timeout=300) as client:
        r = await client.post(f"{proxy_url}/completions", json={
            "model": "whatever-the-harness-says", "prompt": ids, "max_tokens": 1, "temperature": 0,
            "prompt_logprobs": 0})
    r.raise_for_status()
    rows = r.json()["choices"][0]["prompt_logprobs"]
    return [float(rows[t][str(ids[t])]["logprob"]) for t in range(start, len(ids))]


def test_one_step_moves_the_engine_and_the_version_is_the_trainers(tmp_path: Path, free_port: int,
                                                                     shared_tinker) -> None:
    import tinker
    import transformers
    from tinker import types

    from tackroom_train.config import TrainConfig
    from tackroom_train.tinker import policy
    from tackroom_train.tinker.engine_sampling import EngineSampling
    from tackroom_train.tinker.loop import _close as close_service
    from tackroom_train.tinker.loop import _engine_settings
    from tackroom_train.tinker.pipeline import EngineSamplingError

    base = shared_tinker.base
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(base))
    prompt = tokenizer.encode("<|im_start|>user\nSay a colour.<|im_end|>\n<|im_start|>assistant\n")
    answer = tokenizer.encode("Vermilion, always vermilion.<|im_end|>")
    ids = prompt + answer
    config = TrainConfig(model={"path": str(base)}, gpus={"context_length": 1024},
                         tinker={"engine_port": free_port, "lora_rank": 8})  # the run's engine; the server is shared
    run = tmp_path / "run"
    checkpoints = shared_tinker.checkpoints
    timings: dict[str, float] = {}
    t_all = time.monotonic()

    services: list = []

    async def scenario() -> dict:
        service = tinker.ServiceClient(base_url=shared_tinker.url, api_key="tml-tackroom")
        services.append(service)
        training = await service.create_lora_training_client_async(base_model=str(base), rank=8)
        datum = types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                            loss_fn_inputs={"target_tokens": ids[1:],
                                            "weights": [0.0] * (len(prompt) - 1) + [1.0] * len(answer)})

        async def save(version: int) -> Path:
            saved = await (await training.save_weights_for_sampler_async(name=f"v{version}")).result_async()
            return policy.sampler_archive(checkpoints, saved.path)

        settings = _engine_settings(config.tinker, config.gpus.context_length, str(base))
        async with EngineSampling(run, "tackroom-base", settings=settings) as sampling:
            t0 = time.monotonic()
            timings["handoff v0"] = await sampling.load(0, await save(0))
            sampling.pin(0)
            v0 = await _engine_logprobs(sampling.base_url, ids, len(prompt))
            await (await training.forward_backward_async([datum], "cross_entropy")).result_async()
            await (await training.optim_step_async(types.AdamParams(learning_rate=1e-2))).result_async()
            timings["train step"] = time.monotonic() - t0 - timings["handoff v0"]
            t0 = time.monotonic()
            timings["handoff v1"] = (await sampling.load(1, await save(1)))
            timings["handoff v1 incl. save"] = time.monotonic() - t0
            sampling.pin(1)
            v1 = await _engine_logprobs(sampling.base_url, ids, len(prompt))
            fwd = await (await training.forward_async([datum], "cross_entropy")).result_async()
            trainer_v1 = list(fwd.loss_fn_outputs[0]["logprobs"].data)[len(prompt) - 1:]
            sampling.pin(0)  # version 0 is still there and still the base
            v0_again = await _engine_logprobs(sampling.base_url, ids, len(prompt))
            await sampling.check("after the hand-off")
            adapters = dict(sampling.adapters)
            # the engine dies: the next request fails, and check() stops the run
            os.killpg(sampling._state.pid, signal.SIGKILL)
            await asyncio.sleep(2)
            with pytest.raises(httpx.HTTPStatusError):
                await _engine_logprobs(sampling.base_url, ids, len(prompt))
            with pytest.raises(EngineSamplingError, match="failed 1 request"):
                await sampling.check("batch 2 (policy version 1)")
        return {"v0": v0, "v1": v1, "trainer_v1": trainer_v1, "v0_again": v0_again, "adapters": adapters}

    try:
        got = asyncio.run(scenario())
    finally:  # its session heartbeat would outlive the shared server, printing "Tinker is down" every 10 s
        for service in services:
            close_service(service)
    timings["total"] = time.monotonic() - t_all
    n = len(answer)
    shift = sum(abs(a - b) for a, b in zip(got["v0"], got["v1"])) / n
    mismatch = sum(abs(a - b) for a, b in zip(got["v1"], got["trainer_v1"])) / n
    drift = sum(abs(a - b) for a, b in zip(got["v0"], got["v0_again"])) / n
    print(json.dumps({"shift_nats_per_token": round(shift, 3), "engine_vs_trainer_v1": round(mismatch, 4),
                      "v0_reread": round(drift, 4), **{k: round(v, 1) for k, v in timings.items()}}))
    adapter = run / "lora" / "v1"
    assert (adapter / "adapter_config.json").is_file() and (adapter / "adapter_model.safetensors").is_file()
    assert sorted(got["adapters"]) == [0, 1] and got["adapters"][1].endswith("-v1")
    assert shift > 0.5, f"one step at lr 1e-2 moved the engine's logprobs by only {shift:.3f} nats a token"
    assert mismatch < 0.1, f"the engine's version 1 differs from the trainer's by {mismatch:.3f} nats a token"
    assert drift < 0.02
    assert sum(got["v1"]) > sum(got["v0"])  # towards the trained answer
