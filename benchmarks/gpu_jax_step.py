"""One SkyRL JAX training step and one sampling batch, timed, with random-init weights.

What `tackroom train --backend tinker` asks of SkyRL's JAX backend per step (issue 26, item 5):
``forward_backward`` (Tinker's ``importance_sampling`` loss) + ``optim_step`` (Adam) on 12 sequences,
``save_weights_for_sampler`` (the LoRA written as a .tar.gz) + loading it back into the sampler, and
one sampling batch of 12 sequences. The machine that times this on a GPU reaches no model hub, so the
weights are random, built from the architecture's config (``AutoModelForCausalLM.from_config`` +
``save_pretrained``): speed depends on shapes, not on weight values. Random weights never sample EOS
on purpose and no stop tokens are passed, so every sampled sequence runs its full ``max_tokens``.

It drives ``skyrl.backends.jax.JaxBackend`` in-process (what ``skyrl.tinker.api --backend jax``
instantiates), without the HTTP server and its database, so the numbers are the backend's own.
Each model runs in a child process (JAX keeps its device memory until the process exits).

Runs where ``skyrl[jax]==0.4.0`` imports, e.g. the Tinker server's environment here:

    PY=~/.cache/tackroom/tinker-server/.venv/bin/python
    $PY benchmarks/gpu_jax_step.py --device cpu --tiny --out /tmp/jax-step.jsonl   # smoke, ~1 min
    $PY benchmarks/gpu_jax_step.py --stage-assets DIR   # configs + tokenizers for a machine without them
    python3 gpu_jax_step.py --device gpu --assets DIR --out results.jsonl       # on the GPU machine

``packages/train/docs/gpu-step.md`` has the H200 numbers and the exact commands.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The architectures timed. SmolLM2-135M's config is the locally converted model's (what the CPU runs
# train); the Qwen3 ones are the published configs of Qwen3-0.6B / Qwen3-1.7B (no download needed).
_QWEN3_COMMON = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "max_position_embeddings": 40960,
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
    "tie_word_embeddings": True,
    "use_cache": True,
    "vocab_size": 151936,
    "dtype": "bfloat16",
}
QWEN3_CONFIGS = {
    "qwen3-0.6b": {**_QWEN3_COMMON, "hidden_size": 1024, "intermediate_size": 3072},
    "qwen3-1.7b": {**_QWEN3_COMMON, "hidden_size": 2048, "intermediate_size": 6144},
}
MODELS = {"smollm2-135m": "smollm2", "qwen3-0.6b": "qwen3", "qwen3-1.7b": "qwen3"}  # model -> tokenizer
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# A small config of the same architecture for the CPU smoke (--tiny).
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16}


def local_assets() -> Path:
    """Where this machine keeps SmolLM2's converted config and the tokenizers (tackroom's cache)."""
    return Path(os.environ.get("TACKROOM_CACHE", Path.home() / ".cache" / "tackroom"))


def stage_assets(dest: Path, cache: Path) -> list[Path]:
    """Copy what a machine without tackroom's cache needs: SmolLM2's config and the two tokenizers."""
    wanted = [(cache / "models" / "SmolLM2-135M-Instruct" / "config.json", dest / "smollm2-135m.config.json")]
    for tok in sorted(set(MODELS.values())):
        wanted += [(cache / "tokenizers" / tok / f, dest / "tokenizers" / tok / f) for f in TOKENIZER_FILES]
    missing = [str(src) for src, _ in wanted if not src.is_file()]
    if missing:
        raise SystemExit(f"missing in {cache}: {', '.join(missing)} (run `tackroom model up` once, "
                         "and `scripts/setup` for the tokenizers)")
    for src, dst in wanted:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    return [dst for _, dst in wanted]


def model_config(name: str, assets: Path, *, tiny: bool) -> dict:
    if name not in MODELS:
        raise SystemExit(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    if name in QWEN3_CONFIGS:
        config = dict(QWEN3_CONFIGS[name])
    else:
        for path in (assets / "smollm2-135m.config.json",
                     assets / "models" / "SmolLM2-135M-Instruct" / "config.json"):
            if path.is_file():
                config = json.loads(path.read_text())
                break
        else:
            raise SystemExit(f"no SmolLM2-135M config under {assets} (smollm2-135m.config.json or "
                             "models/SmolLM2-135M-Instruct/config.json); --stage-assets writes one")
    if tiny:
        config.update(TINY)
    return config


def tokenizer_dir(name: str, assets: Path) -> Path:
    path = assets / "tokenizers" / MODELS[name]
    missing = [f for f in TOKENIZER_FILES if not (path / f).is_file()]
    if missing:
        raise SystemExit(f"no {MODELS[name]} tokenizer in {path} (missing {', '.join(missing)})")
    return path


def build_random_model(config: dict, tokenizer: Path, out: Path) -> int:
    """A HF folder with random bf16 weights of the architecture in `config`; returns the parameter count."""
    import torch
    import transformers

    hf_config = transformers.AutoConfig.for_model(**config)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch.bfloat16)
    n_params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(out)
    for f in TOKENIZER_FILES:
        shutil.copyfile(tokenizer / f, out / f)
    del model
    return n_params


def shapes(tiny: bool) -> dict:
    """Item 3's shapes: a step of 12 trials (3 tasks x 4 samples); terminus's 3-turn episodes
    are ~1k tokens in training, its prompts 512-768 tokens and 96 new tokens a turn when sampled
    (archipelago's answers run longer: 256)."""
    if tiny:
        return {"train": {"seqs": 2, "tokens": 60, "trained_tokens": 20},
                "sample": [{"seqs": 2, "prompt_tokens": (20, 30), "max_tokens": 8}]}
    return {"train": {"seqs": 12, "tokens": 1000, "trained_tokens": 300},
            "sample": [{"seqs": 12, "prompt_tokens": (500, 768), "max_tokens": 96},
                       {"seqs": 12, "prompt_tokens": (500, 768), "max_tokens": 256}]}


def _peak_gib() -> float | None:
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    return None if peak is None else round(peak / 2**30, 2)


def run_one(name: str, args: argparse.Namespace) -> dict:
    """Build, load, train `args.steps` steps and sample; every phase timed in seconds."""
    import numpy as np

    assets = Path(args.assets)
    config = model_config(name, assets, tiny=args.tiny)
    tok = tokenizer_dir(name, assets)
    record: dict = {"model": name, "tiny": args.tiny, "lora_rank": args.lora_rank,
                    "max_lora_adapters": args.max_lora_adapters,
                    "max_lora_rank": args.max_lora_rank or args.lora_rank}
    work = Path(tempfile.mkdtemp(prefix=f"jax-step-{name}-"))
    try:
        t = time.perf_counter()
        record["params"] = build_random_model(config, tok, work / "model")
        record["build_weights_s"] = round(time.perf_counter() - t, 2)

        import jax
        from cloudpathlib import AnyPath
        from skyrl.backends.jax import JaxBackend, JaxBackendConfig
        from skyrl.tinker import types

        dev = jax.devices()[0]
        record.update(jax=jax.__version__, platform=dev.platform, device=dev.device_kind)
        t = time.perf_counter()
        backend = JaxBackend(str(work / "model"), JaxBackendConfig(
            max_lora_adapters=args.max_lora_adapters, max_lora_rank=args.max_lora_rank or args.lora_rank,
            sample_max_num_sequences=max(s["seqs"] for s in shapes(args.tiny)["sample"])))
        record["load_base_s"] = round(time.perf_counter() - t, 2)
        model_id = "policy"
        backend.create_model(model_id, types.LoraConfig(rank=args.lora_rank, alpha=32.0, seed=0))

        rng = np.random.default_rng(0)
        vocab = config["vocab_size"]
        tr = shapes(args.tiny)["train"]
        seqs = [rng.integers(100, vocab, tr["tokens"]).tolist() for _ in range(tr["seqs"])]
        n_in = tr["tokens"] - 1
        first = n_in - tr["trained_tokens"]
        weights = [0.0] * first + [1.0] * tr["trained_tokens"]
        batch = types.PreparedModelPassBatch(
            all_model_inputs=[types.ModelInput(chunks=[types.EncodedTextChunk(tokens=s[:-1])]) for s in seqs],
            all_targets=[s[1:] for s in seqs],
            all_token_weights=[weights] * len(seqs),
            # a random model's logprob of a random token is about -ln(vocab): importance ratios near 1
            all_sampling_logprobs=[[-math.log(vocab)] * n_in] * len(seqs),
            all_advantages=[[(1.0 if i % 2 else -1.0) * w for w in weights] for i in range(len(seqs))],
            all_values=[[] for _ in seqs], all_returns=[[] for _ in seqs],
            all_model_ids=[model_id] * len(seqs), all_loss_fns=["importance_sampling"] * len(seqs),
            all_loss_fn_configs=[None] * len(seqs),
            request_batch_slices=[("fb", model_id, 0, len(seqs))])
        adam = types.OptimStepInput(adam_params=types.AdamParams(
            learning_rate=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0))
        record["train_shape"] = tr

        steps = []
        for step in range(args.steps + 1):  # step 0 compiles
            row: dict = {"step": step}
            t = time.perf_counter()
            out = backend.forward_backward(batch)
            row["forward_backward_s"] = time.perf_counter() - t
            if not isinstance(out["fb"], types.ForwardBackwardOutput):
                raise RuntimeError(f"forward_backward failed: {out['fb']}")
            t = time.perf_counter()
            metrics = backend.optim_step(model_id, adam).metrics or {}
            row["optim_step_s"] = time.perf_counter() - t
            row["grad_norm"] = metrics.get("skyrl.ai/grad_norm")
            ckpt = AnyPath(work / "ckpt" / model_id / "sampler_weights" / f"step{step}.tar.gz")
            t = time.perf_counter()
            backend.save_sampler_checkpoint(ckpt, model_id)
            row["save_sampler_s"] = time.perf_counter() - t
            t = time.perf_counter()
            backend.load_sampler_checkpoint(model_id, f"step{step}", ckpt)
            row["load_sampler_s"] = time.perf_counter() - t
            row = {k: round(v, 3) if k.endswith("_s") else v for k, v in row.items()}
            steps.append(row)
            print(f"[{name}] train {row}", flush=True)
        record["train_steps"] = steps
        record["compile_train_s"] = round(steps[0]["forward_backward_s"] + steps[0]["optim_step_s"], 2)
        timed = steps[1:]
        for key in ("forward_backward_s", "optim_step_s", "save_sampler_s", "load_sampler_s"):
            record[f"median_{key}"] = round(statistics.median(r[key] for r in timed), 3)
        record["median_step_s"] = round(record["median_forward_backward_s"] + record["median_optim_step_s"], 3)
        record["median_step_with_handoff_s"] = round(
            record["median_step_s"] + record["median_save_sampler_s"] + record["median_load_sampler_s"], 3)
        record["peak_gib_after_train"] = _peak_gib()

        samples = []
        for shape in shapes(args.tiny)["sample"]:
            lo, hi = shape["prompt_tokens"]
            prompts = [rng.integers(100, vocab, int(n)).tolist()
                       for n in np.linspace(lo, hi, shape["seqs"]).round()]
            n = len(prompts)
            sbatch = types.PreparedSampleBatch(
                all_model_inputs=[types.ModelInput(chunks=[types.EncodedTextChunk(tokens=p)]) for p in prompts],
                all_sampling_params=[types.SamplingParams(temperature=1.0, max_tokens=shape["max_tokens"], seed=i)
                                     for i in range(n)],
                all_model_ids=[model_id] * n, all_checkpoint_ids=[f"step{args.steps}"] * n,
                all_checkpoint_paths=[""] * n, all_session_ids=[None] * n, needs_prompt_logprobs=False,
                request_batch_slices=[(f"s{i}", model_id, i, i + 1, False, 0) for i in range(n)])
            times = []
            for _ in range(args.sample_repeats + 1):  # the first compiles
                t = time.perf_counter()
                res = backend.sample(sbatch)
                times.append(time.perf_counter() - t)
                bad = [r for r in res.values() if not isinstance(r, types.SampleOutput)]
                if bad:
                    raise RuntimeError(f"sampling failed: {bad[0]}")
            new_tokens = sum(len(r.sequences[0].tokens) for r in res.values())
            med = statistics.median(times[1:])
            row = {**shape, "prompt_tokens": [lo, hi], "first_s": round(times[0], 2),
                   "times_s": [round(x, 3) for x in times[1:]], "median_s": round(med, 3),
                   "new_tokens": new_tokens, "tokens_per_s": round(new_tokens / med, 1)}
            samples.append(row)
            print(f"[{name}] sample {row}", flush=True)
        record["sample"] = samples
        record["peak_gib"] = _peak_gib()
        record["compile_s"] = {"train": record["compile_train_s"],
                               **{f"sample_{s['max_tokens']}": s["first_s"] for s in samples}}
        record["status"] = "ok"
        return record
    finally:
        shutil.rmtree(work, ignore_errors=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", action="append", help=f"repeatable; default all: {', '.join(MODELS)}")
    p.add_argument("--device", choices=["cpu", "gpu"], default="gpu")
    p.add_argument("--tiny", action="store_true", help="a 2-layer config and tiny batches (the CPU smoke)")
    p.add_argument("--steps", type=int, default=3, help="timed training steps after the compiling one")
    p.add_argument("--sample-repeats", type=int, default=2, help="timed sampling batches after the compiling one")
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--max-lora-adapters", type=int, default=2, help="SkyRL's JaxBackendConfig (slot 0 is the base)")
    p.add_argument("--max-lora-rank", type=int, help="SkyRL's JaxBackendConfig; default: --lora-rank "
                   "(`tackroom train` leaves SkyRL's defaults: 32 adapters, rank 32)")
    p.add_argument("--assets", default=str(local_assets()),
                   help="SmolLM2 config + tokenizers: tackroom's cache, or a --stage-assets folder")
    p.add_argument("--out", help="append one JSON line per model here")
    p.add_argument("--timeout", type=float, default=540.0, help="seconds per model (child process)")
    p.add_argument("--stage-assets", metavar="DIR", help="copy the assets from tackroom's cache to DIR and exit")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.steps < 1 or args.sample_repeats < 1:
        p.error("--steps and --sample-repeats must be at least 1 (the first call of each shape compiles)")
    for name in args.model or []:
        if name not in MODELS:
            p.error(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.stage_assets:
        for path in stage_assets(Path(args.stage_assets), Path(args.assets)):
            print(path)
        return 0
    if args.child:
        (name,) = args.model
        print("RESULT " + json.dumps(run_one(name, args)), flush=True)
        return 0
    env = {**os.environ, "JAX_PLATFORMS": "cpu" if args.device == "cpu" else "cuda", "PYTHONUNBUFFERED": "1"}
    failed = 0
    for name in args.model or list(MODELS):
        cmd = [sys.executable, __file__, "--child", "--model", name, "--device", args.device,
               "--steps", str(args.steps), "--sample-repeats", str(args.sample_repeats),
               "--lora-rank", str(args.lora_rank), "--max-lora-adapters", str(args.max_lora_adapters),
               "--max-lora-rank", str(args.max_lora_rank or args.lora_rank),
               "--assets", args.assets] + (["--tiny"] if args.tiny else [])
        t = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode == 0 and lines:
                record = json.loads(lines[-1][len("RESULT "):])
            else:
                record = {"model": name, "status": "failed", "returncode": proc.returncode,
                          "stdout_tail": proc.stdout[-2000:], "stderr_tail": proc.stderr[-3000:]}
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            record = {"model": name, "status": "timeout", "timeout_s": args.timeout, "stdout_tail": out[-3000:]}
        record["wall_s"] = round(time.perf_counter() - t, 1)
        failed += record["status"] != "ok"
        print(json.dumps(record), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(record) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
