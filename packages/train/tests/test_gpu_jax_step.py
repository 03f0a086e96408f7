"""benchmarks/gpu_jax_step.py: its refusals, and its CPU smoke against SkyRL's real JAX backend.

The H200 numbers in docs/gpu-step.md come from this script; the smoke (`--device cpu --tiny`: a
2-layer SmolLM2-shaped model, 2 sequences) runs the same code path in the Tinker server's
environment here, so a SkyRL upgrade that breaks the in-process backend calls fails a test, not the
next GPU session. Marked ``tinker``: 5 min on this shared 2-core machine at load average ~20, 19 min
at ~100 (mostly imports and XLA compiles).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tackroom.testing import skip_or_fail

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu_jax_step.py"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_jax_step", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(*args: str, python: str = sys.executable, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([python, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def test_an_unknown_model_is_refused_with_the_known_ones() -> None:
    proc = _run("--model", "qwen2.5-0.5b")
    assert proc.returncode == 2
    assert "unknown model 'qwen2.5-0.5b'" in proc.stderr
    for known in ("smollm2-135m", "qwen3-0.6b", "qwen3-1.7b"):
        assert known in proc.stderr


def test_zero_timed_steps_are_refused() -> None:
    proc = _run("--steps", "0")
    assert proc.returncode == 2
    assert "--steps and --sample-repeats must be at least 1" in proc.stderr


def test_staging_from_an_empty_cache_names_every_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as err:
        _module().stage_assets(tmp_path / "out", tmp_path / "cache")
    message = str(err.value)
    assert "SmolLM2-135M-Instruct/config.json" in message
    assert "tokenizers/qwen3/tokenizer.json" in message
    assert "tokenizers/smollm2/tokenizer_config.json" in message
    assert not (tmp_path / "out").exists()


def test_configs_of_the_timed_architectures(tmp_path: Path) -> None:
    gpu = _module()
    (tmp_path / "smollm2-135m.config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 576}))
    assert gpu.model_config("smollm2-135m", tmp_path, tiny=False)["hidden_size"] == 576
    q = gpu.model_config("qwen3-1.7b", tmp_path, tiny=False)
    assert (q["model_type"], q["hidden_size"], q["num_hidden_layers"], q["vocab_size"]) == ("qwen3", 2048, 28, 151936)
    assert gpu.model_config("qwen3-0.6b", tmp_path, tiny=True)["num_hidden_layers"] == 2
    with pytest.raises(SystemExit, match="no SmolLM2-135M config under"):
        gpu.model_config("smollm2-135m", tmp_path / "elsewhere", tiny=False)
    with pytest.raises(SystemExit, match="no qwen3 tokenizer in"):
        gpu.tokenizer_dir("qwen3-0.6b", tmp_path)


@pytest.mark.tinker
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_cpu_smoke_runs_a_real_step_and_samples(tmp_path: Path) -> None:
    from tackroom_gateway.tokenizers import smollm2_tokenizer_dir
    from tackroom_train.tinker.server import server_dir

    python = server_dir() / ".venv" / "bin" / "python"
    cache = Path(os.environ.get("TACKROOM_CACHE", Path.home() / ".cache" / "tackroom"))
    model = cache / "models" / "SmolLM2-135M-Instruct" / "config.json"
    if model.exists():
        # Built on first use (from the GGUF `tackroom model up` fetched): no earlier test may have needed it yet.
        smollm2_tokenizer_dir()
    missing = [p for p in (python, model, cache / "tokenizers" / "smollm2" / "tokenizer.json") if not p.exists()]
    if missing:
        skip_or_fail(f"missing: {', '.join(map(str, missing))} (scripts/setup, `tackroom model up`)")
    out = tmp_path / "results.jsonl"
    proc = _run("--device", "cpu", "--tiny", "--model", "smollm2-135m", "--steps", "1", "--sample-repeats", "1",
                "--out", str(out), "--timeout", "1200", python=str(python), timeout=1400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert (record["status"], record["platform"], record["max_lora_rank"]) == ("ok", "cpu", 8)
    step = record["train_steps"][1]
    assert step["grad_norm"] > 0  # the importance-sampling loss reached the LoRA
    for key in ("forward_backward_s", "optim_step_s", "save_sampler_s", "load_sampler_s"):
        assert step[key] > 0
    (sample,) = record["sample"]
    assert sample["new_tokens"] == sample["seqs"] * sample["max_tokens"]  # no stop tokens: full length
    assert sample["median_s"] > 0 and sample["tokens_per_s"] > 0
