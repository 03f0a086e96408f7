"""The trained policy as a servable folder: unpacking the Tinker sampler checkpoint and merging the LoRA.

The merge is checked here against PEFT applying the same adapter unmerged (a tiny random Llama, float32,
so any disagreement is a bug, not rounding); ``test_tinker_policy.py`` checks it against SkyRL's own
trainer on SmolLM2 (bf16), which is what fixes the scale as SkyRL defines it.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from tackroom_train.tinker import policy

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"


def tiny_llama(folder: Path, *, dtype=torch.float32, tie: bool = True) -> Path:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      tie_word_embeddings=tie)
    model = transformers.LlamaForCausalLM(config).to(dtype)
    model.save_pretrained(folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "base {{ messages }}", "eos_token": "x"}))
    (folder / "tokenizer.json").write_text("{}")
    (folder / "pytorch_model.bin").write_bytes(b"old weights that must not travel")
    return folder


def random_adapter(base: Path, folder: Path, *, r: int = 4, alpha: float = 32.0, modules=None):
    """A PEFT LoRA with non-zero A and B on every linear layer (as SkyRL's sampler checkpoint holds one)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = peft.LoraConfig(r=r, lora_alpha=alpha, target_modules=modules or
                             ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    lora = peft.get_peft_model(model, config)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn_like(p) * 0.05)
    lora.save_pretrained(folder)
    return lora


def logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def test_the_merged_folder_computes_what_base_plus_lora_computes(tmp_path):
    base = tiny_llama(tmp_path / "base")
    lora = random_adapter(base, tmp_path / "adapter")
    report = policy.merge_lora(base, tmp_path / "adapter", tmp_path / "policy", chat_template=TEMPLATE,
                               checkpoint="tinker://m/sampler_weights/final")
    assert (report.rank, report.alpha, report.scale) == (4, 32.0, 8.0)
    assert report.merged_modules == 2 * 7 and report.chat_template == "training tokenizer"

    merged = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "policy", dtype=torch.float32)
    plain = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    ids = [3, 17, 42, 5, 88, 1, 60]
    want, got, before = logits(lora, ids), logits(merged, ids), logits(plain, ids)
    assert (want - before).abs().max() > 0.1, "the adapter must change the model for this test to mean anything"
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

    files = {p.name for p in (tmp_path / "policy").iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
            policy.PROVENANCE} <= files
    assert "pytorch_model.bin" not in files, "only the merged weights travel"
    assert (tmp_path / "policy" / "chat_template.jinja").read_text() == TEMPLATE
    assert json.loads((tmp_path / "policy" / "tokenizer_config.json").read_text())["chat_template"] == TEMPLATE
    assert json.loads((tmp_path / "policy" / policy.PROVENANCE).read_text())["checkpoint"] == "tinker://m/sampler_weights/final"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".policy-")], "no half-built folder is left"


def test_bf16_weights_stay_bf16_and_the_delta_is_added_in_float32(tmp_path):
    base = tiny_llama(tmp_path / "base", dtype=torch.bfloat16)
    random_adapter(base, tmp_path / "adapter", r=2, alpha=8.0, modules=["q_proj"])
    report = policy.merge_lora(base, tmp_path / "adapter", tmp_path / "policy")
    assert report.dtype == "bfloat16" and report.scale == 4.0 and report.chat_template == "base folder"

    from safetensors.torch import load_file

    w0 = load_file(str(base / "model.safetensors"))
    w1 = load_file(str(tmp_path / "policy" / "model.safetensors"))
    ad = load_file(str(tmp_path / "adapter" / "adapter_model.safetensors"))
    key = "model.layers.1.self_attn.q_proj"
    a, b = ad[f"base_model.model.{key}.lora_A.weight"].float(), ad[f"base_model.model.{key}.lora_B.weight"].float()
    assert w1[f"{key}.weight"].dtype == torch.bfloat16
    assert torch.equal(w1[f"{key}.weight"], (w0[f"{key}.weight"].float() + 4.0 * b @ a).bfloat16())
    assert torch.equal(w1["model.layers.1.self_attn.k_proj.weight"], w0["model.layers.1.self_attn.k_proj.weight"])


def test_rslora_scale_and_refusals(tmp_path):
    assert policy.lora_scale({"r": 16, "lora_alpha": 32}) == (16, 32.0, 2.0)
    assert policy.lora_scale({"r": 16, "lora_alpha": 32, "use_rslora": True}) == (16, 32.0, 8.0)
    with pytest.raises(policy.PolicyExportError, match="rank_pattern"):
        policy.lora_scale({"r": 8, "lora_alpha": 32, "rank_pattern": {"q_proj": 4}})

    base = tiny_llama(tmp_path / "base")
    random_adapter(base, tmp_path / "adapter", modules=["q_proj"])
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(tmp_path / "adapter" / "adapter_model.safetensors"))
    renamed = {k.replace("layers.0", "layers.7"): v for k, v in tensors.items()}
    save_file(renamed, str(tmp_path / "adapter" / "adapter_model.safetensors"))
    with pytest.raises(policy.PolicyExportError, match="does not have: model.layers.7.self_attn.q_proj"):
        policy.merge_lora(base, tmp_path / "adapter", tmp_path / "policy")
    assert not (tmp_path / "policy").exists()


def test_the_sampler_archive_is_found_and_unpacked(tmp_path):
    path = "tinker://model_ab12/sampler_weights/final"
    assert policy.parse_sampler_path(path) == ("model_ab12", "final")
    assert policy.parse_sampler_path("tinker://model_ab12/final") == ("model_ab12", "final")  # SkyRL's answer
    for bad in ("tinker://model_ab12/weights/final", "tinker://model_ab12", "file:///x/final"):
        with pytest.raises(policy.PolicyExportError, match="not a Tinker sampler checkpoint"):
            policy.parse_sampler_path(bad)
    archive = policy.sampler_archive(tmp_path / "checkpoints", path)
    assert archive == tmp_path / "checkpoints" / "model_ab12" / "sampler_weights" / "final.tar.gz"

    archive.parent.mkdir(parents=True)
    with tarfile.open(archive, "w:gz") as tar:  # as SkyRL's pack_and_upload writes it: the files at the top
        for name, data in (("adapter_config.json", b'{"r": 8, "lora_alpha": 32}'), ("adapter_model.safetensors", b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    out = policy.unpack_adapter(archive, tmp_path / "run" / "adapter")
    assert sorted(p.name for p in out.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]

    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        info = tarfile.TarInfo("../escape.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(policy.PolicyExportError):
        policy.unpack_adapter(evil, tmp_path / "run" / "adapter2")
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "run" / "escape.txt").exists()


def test_the_serve_command():
    assert policy.serve_command("runs/train/x/policy", name="x") == \
        "tackroom model up --model runs/train/x/policy --port 8012 --name x"


def test_latest_points_at_the_newest_run_and_never_replaces_a_real_folder(tmp_path):
    first, second = tmp_path / "20261201-100000-aaaaaa", tmp_path / "20261201-110000-bbbbbb"
    for d in (first, second):
        (d / "policy").mkdir(parents=True)
        (d / "policy" / "config.json").write_text(d.name)
    assert policy.mark_latest(first) == tmp_path / "latest"
    assert (tmp_path / "latest" / "policy" / "config.json").read_text() == first.name
    policy.mark_latest(second)
    assert (tmp_path / "latest" / "policy" / "config.json").read_text() == second.name
    assert (tmp_path / "latest").readlink() == Path(second.name)  # relative: the runs folder can move
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.name, second.name, "latest"])  # no temp links left
    other = tmp_path / "elsewhere"
    (other / "latest").mkdir(parents=True)  # a run folder someone named "latest"
    (other / "run").mkdir()
    assert policy.mark_latest(other / "run") is None
    assert (other / "latest").is_dir() and not (other / "latest").is_symlink()
