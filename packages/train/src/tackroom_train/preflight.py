"""What the SkyRL path needs before anything starts: NVIDIA GPUs, enough of them, and vLLM."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

from pydantic import BaseModel

from tackroom import TackroomError
from tackroom_train.config import GpuSplit


class GpuRequirementError(TackroomError):
    """``tackroom train`` (SkyRL backend) was started where it cannot train."""


class Machine(BaseModel):
    """What this machine offers the trainer."""

    gpus: int
    vllm: bool
    skyrl: bool


def probe_machine(timeout: float = 15.0) -> Machine:
    """Count NVIDIA GPUs (``nvidia-smi -L``, else ``/dev/nvidiaN``) and look for vllm and skyrl."""
    gpus = 0
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=timeout)
            gpus = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
        except (subprocess.TimeoutExpired, OSError):
            gpus = 0
    if not gpus:
        gpus = sum(1 for p in Path("/dev").glob("nvidia[0-9]*"))
    return Machine(gpus=gpus, vllm=importlib.util.find_spec("vllm") is not None,
                   skyrl=importlib.util.find_spec("skyrl") is not None)


def check_machine(gpus: GpuSplit, machine: Machine | None = None) -> Machine:
    """Fail early, with the fix, when the SkyRL path cannot run here with ``[gpus]``."""
    machine = machine or probe_machine()
    problems = []
    if machine.gpus == 0:
        problems.append("no NVIDIA GPU (nvidia-smi lists none, no /dev/nvidia*)")
    need = (gpus.inference + gpus.train) // gpus.nodes
    if 0 < machine.gpus < need and gpus.nodes == 1:
        problems.append(f"[gpus] asks for {gpus.inference} inference + {gpus.train} train GPUs, "
                        f"this node has {machine.gpus}")
    if not machine.vllm:
        problems.append("vllm is not importable in this environment")
    if not machine.skyrl:
        problems.append("skyrl is not installed")
    if problems:
        raise GpuRequirementError(
            "tackroom train (backend skyrl) runs SkyRL's fully-async trainer, which needs NVIDIA GPUs and vLLM: "
            + "; ".join(problems) + ". Run it on a GPU node with `pip install 'tackroom-train[skyrl]' vllm`, "
            "lower [gpus] to what the node has, or check the config without training: "
            "`tackroom train CONFIG --dry-run` prints the SkyRL config and the concurrency ceilings."
        )
    return machine
