"""The trained policy as a model an engine serves: the final LoRA merged into the base, as a plain HF folder.

What the Tinker server keeps: ``save_weights_for_sampler(name="final")`` makes SkyRL's JAX backend write
``<checkpoints>/<model_id>/sampler_weights/final.tar.gz`` (``skyrl.tx.utils.models.save_lora_checkpoint``):
a PEFT adapter, i.e. ``adapter_config.json`` (``r``, ``lora_alpha``) and ``adapter_model.safetensors`` with
``base_model.model.<module>.lora_A.weight`` (``r × in``) and ``….lora_B.weight`` (``out × r``) for every
adapted linear layer, already transposed from JAX's ``in × out`` kernels to torch's ``out × in`` layout.

How SkyRL applies it (``skyrl.tx.layers.lora``): ``y = x·W + s·(x·A)·B`` with ``s = alpha / rank``
(``init_lora_adapter``; the server fixes ``alpha = 32``, Tinker's default, and writes it as ``lora_alpha``).
In torch's layout that is ``W' = W + s · B @ A``, which :func:`merge_lora` computes in float32 and rounds
to the base's dtype (bf16 for SmolLM2), tensor by tensor, keeping the base's safetensors files and names.
Everything else the base folder holds (config, generation config, tokenizer files) is copied; the chat
template becomes the one training rendered prompts with, so the served model sees what it was trained on.

:func:`fetch_adapter` gets the archive: from the checkpoints folder of a server this run started, or
through the Tinker SDK's archive URL from a server given by ``[tinker] url``.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tackroom import InfraError
from tackroom_engine.engine import TRAINED_POLICY_MARK

PROVENANCE = TRAINED_POLICY_MARK
"""The provenance file in ``<run>/policy``; the engine names a folder holding it after its run."""
ADAPTER_PREFIX = "base_model.model."
# weight formats other than safetensors that a base folder may also carry: never copied next to merged weights
OTHER_WEIGHTS = (".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5", ".ckpt")


class PolicyExportError(InfraError):
    """The final LoRA could not be fetched or merged into a servable folder."""


class PolicyFolder(BaseModel):
    """What :func:`merge_lora` wrote (also ``<folder>/tackroom-policy.json``)."""

    path: str
    base_model: str
    adapter: str
    checkpoint: str | None = None
    rank: int
    alpha: float
    scale: float
    merged_modules: int
    dtype: str
    chat_template: str | None = None
    """Where the chat template came from: ``training tokenizer`` or ``base folder``."""


def parse_sampler_path(tinker_path: str) -> tuple[str, str]:
    """``tinker://<model_id>/sampler_weights/<name>`` or ``tinker://<model_id>/<name>`` (what SkyRL's server
    answers ``save_weights_for_sampler`` with) → ``(model_id, name)``."""
    m = re.fullmatch(r"tinker://([^/]+)/(?:sampler_weights/)?([^/]+)", tinker_path or "")
    if m is None or m.group(2) in ("weights", "sampler_weights"):
        raise PolicyExportError(f"{tinker_path!r} is not a Tinker sampler checkpoint (tinker://<model>/sampler_weights/<name>)")
    return m.group(1), m.group(2)


def sampler_archive(checkpoints: str | Path, tinker_path: str) -> Path:
    """The archive SkyRL's server wrote for ``tinker_path`` under its ``--checkpoints-base``."""
    model_id, name = parse_sampler_path(tinker_path)
    return Path(checkpoints) / model_id / "sampler_weights" / f"{name}.tar.gz"


async def download_archive(service: Any, tinker_path: str, dest: Path, *, timeout: float = 900.0) -> Path:
    """Download a sampler checkpoint through the Tinker SDK's archive URL (a server we did not start)."""
    import httpx

    model_id, name = parse_sampler_path(tinker_path)
    rest = service.create_rest_client()
    answer = await rest.get_checkpoint_archive_url_async(model_id, name)
    try:
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=True) as client:
            async with client.stream("GET", answer.url) as response:
                response.raise_for_status()
                with dest.open("wb") as out:
                    async for chunk in response.aiter_bytes(1 << 20):
                        out.write(chunk)
    except httpx.HTTPError as exc:
        raise PolicyExportError(f"could not download {tinker_path} from {answer.url}: {type(exc).__name__}: {exc}") from exc
    return dest


def unpack_adapter(archive: str | Path, dest: str | Path) -> Path:
    """Unpack a sampler checkpoint archive into ``dest`` (replaced), refusing anything but plain files."""
    archive, dest = Path(archive), Path(dest)
    if not archive.is_file():
        raise PolicyExportError(f"the final LoRA's archive {archive} is not there")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        with tarfile.open(archive, "r:*") as tar:
            tar.extractall(tmp, filter="data")
        # the files may sit at the top or inside one folder
        found = sorted(tmp.rglob("adapter_config.json"))
        if len(found) != 1 or not (found[0].parent / "adapter_model.safetensors").is_file():
            raise PolicyExportError(f"{archive} holds no PEFT adapter (adapter_config.json + adapter_model.safetensors)")
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(found[0].parent, dest)
    except (tarfile.TarError, OSError) as exc:
        raise PolicyExportError(f"could not unpack {archive}: {type(exc).__name__}: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def lora_scale(adapter_config: dict[str, Any]) -> tuple[int, float, float]:
    """``(rank, alpha, scale)`` of a PEFT adapter config, as SkyRL (and PEFT) apply it."""
    for key in ("rank_pattern", "alpha_pattern"):
        if adapter_config.get(key):
            raise PolicyExportError(f"adapter_config.json sets {key}; per-module ranks are not supported")
    if adapter_config.get("use_dora"):
        raise PolicyExportError("adapter_config.json sets use_dora; only plain LoRA is merged")
    rank, alpha = int(adapter_config["r"]), float(adapter_config["lora_alpha"])
    scale = alpha / math.sqrt(rank) if adapter_config.get("use_rslora") else alpha / rank
    return rank, alpha, scale


def _lora_pairs(tensors: dict[str, Any]) -> dict[str, dict[str, Any]]:
    pairs: dict[str, dict[str, Any]] = {}
    for key, tensor in tensors.items():
        m = re.fullmatch(re.escape(ADAPTER_PREFIX) + r"(.+)\.lora_([AB])\.weight", key)
        if m is None:
            raise PolicyExportError(f"adapter tensor {key!r} is not a LoRA A/B matrix of a linear layer; cannot merge it")
        pairs.setdefault(m.group(1), {})[m.group(2)] = tensor
    for module, ab in pairs.items():
        if set(ab) != {"A", "B"}:
            raise PolicyExportError(f"adapter module {module}: lora_A and lora_B must both be there")
        parts = module.split(".")
        if "embed_tokens" in parts:
            raise PolicyExportError(f"adapter module {module}: LoRA on the embedding is not supported")
        if "experts" in parts:  # SkyRL divides the rank among experts (alpha / (rank // n_experts)): not PEFT's scale
            raise PolicyExportError(f"adapter module {module}: LoRA on MoE experts is not supported")
    return pairs


def _weight_files(base_dir: Path) -> list[Path]:
    index = base_dir / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [base_dir / n for n in names]
    files = sorted(base_dir.glob("*.safetensors"))
    if not files:
        raise PolicyExportError(f"{base_dir} holds no *.safetensors weights")
    return files


def merge_lora(base_dir: str | Path, adapter_dir: str | Path, out_dir: str | Path, *,
               chat_template: str | None = None, checkpoint: str | None = None) -> PolicyFolder:
    """Write ``out_dir``: ``base_dir`` with the adapter merged (``W + alpha/r · B @ A``), servable as is.

    ``chat_template`` (the training tokenizer's) replaces the base folder's; the folder is built beside
    ``out_dir`` and renamed into place, so a half-written policy is never mistaken for one.
    """
    import torch
    from safetensors.torch import load_file, save_file

    base_dir, adapter_dir, out_dir = Path(base_dir), Path(adapter_dir), Path(out_dir)
    adapter_config = json.loads((adapter_dir / "adapter_config.json").read_text())
    rank, alpha, scale = lora_scale(adapter_config)
    pairs = _lora_pairs(load_file(str(adapter_dir / "adapter_model.safetensors")))
    model_config = json.loads((base_dir / "config.json").read_text())
    if model_config.get("tie_word_embeddings") and "lm_head" in {m.rsplit(".", 1)[-1] for m in pairs}:
        raise PolicyExportError("the adapter changes lm_head, which this model ties to its embedding")

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        merged: set[str] = set()
        dtypes: set[str] = set()
        for file in _weight_files(base_dir):
            tensors = load_file(str(file))
            for module, ab in pairs.items():
                key = f"{module}.weight"
                if key not in tensors:
                    continue
                w, a, b = tensors[key], ab["A"], ab["B"]
                if a.shape[0] != rank or b.shape[1] != rank or (b.shape[0], a.shape[1]) != tuple(w.shape):
                    raise PolicyExportError(f"{module}: LoRA shapes A {tuple(a.shape)}, B {tuple(b.shape)} do not fit "
                                            f"the weight {tuple(w.shape)} at rank {rank}")
                delta = b.to(torch.float32) @ a.to(torch.float32)
                tensors[key] = (w.to(torch.float32) + scale * delta).to(w.dtype).contiguous()
                dtypes.add(str(w.dtype).removeprefix("torch."))
                merged.add(module)
            save_file(tensors, str(tmp / file.name), metadata={"format": "pt"})
        missing = sorted(set(pairs) - merged)
        if missing:
            raise PolicyExportError(f"the adapter adapts modules the base {base_dir} does not have: {', '.join(missing[:5])}")
        for item in base_dir.iterdir():
            if item.is_file() and item.suffix != ".safetensors" and not item.name.endswith(OTHER_WEIGHTS) \
                    and item.name != PROVENANCE:
                shutil.copy2(item, tmp / item.name)
        source = "base folder" if (tmp / "chat_template.jinja").is_file() or _config_template(tmp) else None
        if chat_template is not None:
            _set_chat_template(tmp, chat_template)
            source = "training tokenizer"
        report = PolicyFolder(path=str(out_dir), base_model=str(base_dir), adapter=str(adapter_dir), checkpoint=checkpoint,
                              rank=rank, alpha=alpha, scale=scale, merged_modules=len(merged),
                              dtype=",".join(sorted(dtypes)), chat_template=source)
        (tmp / PROVENANCE).write_text(report.model_dump_json(indent=2))
        shutil.rmtree(out_dir, ignore_errors=True)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return report


def _config_template(folder: Path) -> bool:
    path = folder / "tokenizer_config.json"
    return path.is_file() and bool(json.loads(path.read_text()).get("chat_template"))


def _set_chat_template(folder: Path, template: str) -> None:
    """One chat template, the same in both places transformers and vLLM look for one."""
    (folder / "chat_template.jinja").write_text(template, encoding="utf-8")
    path = folder / "tokenizer_config.json"
    if path.is_file():
        config = json.loads(path.read_text())
        config["chat_template"] = template
        path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def mark_latest(run_dir: str | Path) -> Path | None:
    """Point ``<out>/latest`` at ``run_dir`` (a relative symlink, swapped atomically), so a documented command
    (``tackroom model up --model runs/train/latest/policy``) finds the newest trained policy; the link, or None
    when ``latest`` is something else (a run folder named so) that is left alone."""
    run_dir = Path(run_dir)
    link = run_dir.parent / "latest"
    if link.exists() and not link.is_symlink():
        return None
    tmp = run_dir.parent / f".latest-{os.getpid()}-{run_dir.name}"
    tmp.unlink(missing_ok=True)
    os.symlink(run_dir.name, tmp)
    os.replace(tmp, link)
    return link


def serve_command(policy: str | Path, *, port: int = 8012, name: str | None = None) -> str:
    """The command that serves a policy folder beside the default engine."""
    import shlex

    argv = ["tackroom", "model", "up", "--model", str(policy), "--port", str(port)]
    if name:
        argv += ["--name", name]
    return shlex.join(argv)


async def export_policy(tinker_path: str, run_dir: str | Path, base_model: str | Path, *,
                        chat_template: str | None = None, checkpoints: str | Path | None = None,
                        service: Any = None, name: str = "policy") -> PolicyFolder:
    """The final LoRA (``tinker_path``) as ``<run>/adapter/`` (the PEFT adapter) and ``<run>/policy/`` (merged);
    another ``name`` writes ``<run>/<name>-adapter/`` and ``<run>/<name>/`` (the warm start: ``warm-policy``).

    ``checkpoints``: the ``--checkpoints-base`` of a server this run started (the archive is read there);
    otherwise ``service`` (a ``tinker.ServiceClient``) downloads it.
    """
    import asyncio

    run_dir = Path(run_dir)
    prefix = "" if name == "policy" else f"{name}-"  # the final policy keeps its names: adapter/, final-lora.tar.gz
    if checkpoints is not None:
        archive = sampler_archive(checkpoints, tinker_path)
    elif service is not None:
        archive = await download_archive(service, tinker_path, run_dir / f"{prefix or 'final-'}lora.tar.gz")
    else:
        raise PolicyExportError("export_policy needs the server's checkpoints folder or a Tinker service client")
    adapter = await asyncio.to_thread(unpack_adapter, archive, run_dir / f"{prefix}adapter")
    return await asyncio.to_thread(merge_lora, base_model, adapter, run_dir / name,
                                   chat_template=chat_template, checkpoint=tinker_path)
