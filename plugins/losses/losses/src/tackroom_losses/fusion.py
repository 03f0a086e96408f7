"""Running a loss kernel: eagerly or through ``torch.compile``, and attaching its gradient.

Every loss here is ``sum over b, t of c_b * m_bt * term_bt``: per-token terms,
a mask, and the aggregation's factor per sequence (see
:mod:`tackroom_losses.aggregation`). So the gradient with respect to
``log_probs`` is elementwise, and each loss writes it out analytically:

- the kernel makes one sweep over the inputs (no autograd) and returns the
  loss, the *unscaled* gradient ``m_bt * d term_bt / d log_probs``, the
  factors ``c_b`` and the metrics; every big reduction in it runs along the
  token axis, so it is one fused kernel when compiled;
- :class:`AttachGradient` hands that to autograd; its backward pass is one
  elementwise product, ``gradient * c_b * grad_output``.

The factors need every sequence's token count first, which is why they are
applied in the backward pass: the forward pass never has to wait for them.

Eager PyTorch runs the kernel as a series of small kernels; compiled,
Inductor fuses it. Both compute the same function (the tests check they
agree, and that the gradient equals autograd's on the plain formula).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import torch

from tackroom_losses.errors import LossConfigError

Metrics = dict[str, torch.Tensor]
KernelOutput = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, Metrics]
"""``(loss, unscaled gradient with respect to log_probs or None, factors [B, 1] float32, metrics)``."""


class AttachGradient(torch.autograd.Function):
    """Returns ``loss``; its backward pass gives ``log_probs`` ``gradient * scale * grad_output``."""

    @staticmethod
    def forward(ctx: Any, log_probs: torch.Tensor, loss: torch.Tensor, gradient: torch.Tensor,
                scale: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(gradient, scale)
        return loss.clone()

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        gradient, scale = ctx.saved_tensors
        # one kernel: the product is formed in float32 and rounded once to the gradient's dtype
        out = torch.empty_like(gradient)
        torch.mul(gradient, scale * grad_output, out=out)
        return out, None, None, None


@cache
def _compiled(kernel: Callable[..., KernelOutput]) -> Callable[..., KernelOutput]:
    # dynamic=True: batch and sequence length change every step; one graph serves all.
    return torch.compile(kernel, dynamic=True, fullgraph=True)


def use_fused(fused: bool | None, tensor: torch.Tensor) -> bool:
    """``fused`` as configured; ``None`` means on CUDA tensors only."""
    return tensor.is_cuda if fused is None else fused


def run_loss(
    kernel: Callable[..., KernelOutput], fused: bool | None, log_probs: torch.Tensor, *args: Any
) -> tuple[torch.Tensor, Metrics]:
    """``kernel(log_probs, *args, needs_grad)``, compiled when :func:`use_fused` says so, with its gradient attached."""
    needs_grad = log_probs.requires_grad and torch.is_grad_enabled()
    call = _compiled(kernel) if use_fused(fused, log_probs) else kernel
    try:
        with torch.no_grad():
            loss, gradient, scale, metrics = call(log_probs.detach(), *args, needs_grad)
    except Exception as exc:  # Inductor needs a C++ compiler on CPU and Triton on GPU
        if type(exc).__module__.startswith(("torch._dynamo", "torch._inductor")):
            raise LossConfigError(
                f"torch.compile could not fuse {kernel.__name__} ({type(exc).__name__}: {exc}); "
                "set the loss option fused = false to run it eagerly"
            ) from exc
        raise
    if needs_grad:
        loss = AttachGradient.apply(log_probs, loss, gradient, scale)
    return loss, metrics
