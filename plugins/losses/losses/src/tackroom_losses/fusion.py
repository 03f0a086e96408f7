"""The fused path: the same kernel function, run through ``torch.compile``.

Each loss is one Python function of tensors (mask handling, aggregation
factors, per-token loss, metrics). Eager PyTorch runs it as a dozen small
kernels; compiled, Inductor fuses it into a couple of kernels forward and
backward. Both paths compute the same function (the tests check they agree).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import torch

from tackroom_losses.errors import LossConfigError


@cache
def _compiled(kernel: Callable[..., Any]) -> Callable[..., Any]:
    # dynamic=True: batch and sequence length change every step; one graph serves all.
    return torch.compile(kernel, dynamic=True, fullgraph=True)


def use_fused(fused: bool | None, tensor: torch.Tensor) -> bool:
    """``fused`` as configured; ``None`` means on CUDA tensors only."""
    return tensor.is_cuda if fused is None else fused


def run_kernel(kernel: Callable[..., Any], fused: bool | None, like: torch.Tensor, *args: Any) -> Any:
    """Call ``kernel(*args)``, compiled when :func:`use_fused` says so."""
    if not use_fused(fused, like):
        return kernel(*args)
    try:
        return _compiled(kernel)(*args)
    except Exception as exc:  # Inductor needs a C++ compiler on CPU and Triton on GPU
        if type(exc).__module__.startswith("torch._dynamo") or type(exc).__module__.startswith("torch._inductor"):
            raise LossConfigError(
                f"torch.compile could not fuse {kernel.__name__} ({type(exc).__name__}: {exc}); "
                "set the loss option fused = false to run it eagerly"
            ) from exc
        raise
