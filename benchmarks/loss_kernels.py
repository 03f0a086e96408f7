#!/usr/bin/env python
"""Forward+backward cost of tackroom's losses × aggregations, side by side with SkyRL's built-ins.

    python benchmarks/loss_kernels.py                  # device auto-detected (CUDA if present)
    python benchmarks/loss_kernels.py --device cpu --widths 2048,8192
    python benchmarks/loss_kernels.py --device cuda --json out.json

Each case is one trainer call on a mini-batch of ``--batch`` sequences (in
prompt groups of ``--group``), right-padded to a width, valid lengths ragged
from 2k tokens to the width: the loss (with its aggregation) and the backward
pass to ``log_probs``. Columns, per implementation:

- ``gpu ms``: device time per call inside a training step, where the GPU
  already has work queued and the host runs ahead: the calls are enqueued
  behind a ``torch.cuda._sleep`` and timed with CUDA events from the first to
  the last. A call that synchronises makes the host wait, so its host time
  shows up here too (that is what a sync costs in a trainer). On CPU: the
  median wall time per call;
- ``call ms``: the same call alone, nothing queued (median of CUDA events
  around each call): launch-bound for small kernels, the host's cost per call;
- ``×base``: gpu time over ppo_clip + token_mean of the same implementation;
- ``Gtok/s``: padded tokens per second of gpu time;
- ``%BW``: compulsory bytes (each input read once, the gradient written once)
  per second of gpu time, as a fraction of a measured device-to-device copy;
- ``MiB``: peak memory of the call above what was allocated before it (the
  gradient included);
- ``sync``: host synchronisations inside one call (CUDA sync debug mode).

Implementations: ``eager`` and ``fused`` (torch.compile) are tackroom's;
``skyrl`` is SkyRL 0.4's ``apply_loss_reduction_to_advantages_minibatch``
then its ``regular`` / ``dppo`` / ``rollout_is``, when skyrl imports (Ray is
stubbed when absent: ``ppo_utils`` only decorates a class with ``ray.remote``
and asks ``ray.is_initialized()``).

Needs torch plus tackroom's light dependencies (pydantic, pluggy); nothing
needs installing: the script puts ``core/src`` and the plugin's ``src`` on
``sys.path``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import types
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "core" / "src"), str(REPO / "plugins" / "losses" / "losses" / "src")]

from tackroom_losses import DppoOptions, Glm5Options, PpoClipOptions
from tackroom_losses.dppo import dppo
from tackroom_losses.glm5 import glm5
from tackroom_losses.ppo_clip import ppo_clip

LOSSES = {
    # ours, its options class, SkyRL's name for the same loss
    "ppo_clip": (ppo_clip, PpoClipOptions, "regular"),
    "dppo": (dppo, DppoOptions, "dppo"),
    "glm5": (glm5, Glm5Options, "rollout_is"),
}
AGGREGATIONS = ("token_mean", "sequence_mean", "prompt_mean")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


# -- inputs -------------------------------------------------------------------------


@dataclass
class Inputs:
    log_probs: torch.Tensor
    old_log_probs: torch.Tensor
    rollout_logprobs: torch.Tensor
    advantages: torch.Tensor
    loss_mask: torch.Tensor
    group_ids: torch.Tensor
    num_groups: int
    boundaries: list[tuple[int, int]]

    @property
    def valid_fraction(self) -> float:
        return float(self.loss_mask.mean())


def make_inputs(batch: int, width: int, group: int, dtype: torch.dtype, device: str, seed: int) -> Inputs:
    gen = torch.Generator(device=device).manual_seed(seed)
    low = min(2048, width)
    lengths = torch.randint(low, width + 1, (batch,), generator=gen, device=device)
    mask = (torch.arange(width, device=device).unsqueeze(0) < lengths.unsqueeze(1)).float()
    log_probs = (torch.rand(batch, width, generator=gen, device=device) * 0.98 + 0.02).log()
    old = (log_probs + 0.3 * torch.randn(batch, width, generator=gen, device=device)).clamp(max=0.0)
    rollout = (log_probs + 0.3 * torch.randn(batch, width, generator=gen, device=device)).clamp(max=0.0)
    groups = batch // group
    rewards = torch.rand(groups, group, generator=gen, device=device)
    adv = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-6)).reshape(batch)
    advantages = adv.unsqueeze(1).expand(batch, width).contiguous()
    group_ids = torch.arange(groups, device=device).repeat_interleave(group)
    boundaries = [(g * group, (g + 1) * group) for g in range(groups)]
    cast = {"dtype": dtype}
    return Inputs(log_probs.to(**cast).requires_grad_(True), old.to(**cast), rollout.to(**cast),
                  advantages.to(**cast), mask, group_ids, groups, boundaries)


def compulsory_bytes(inp: Inputs, loss: str) -> int:
    """Each input the loss needs read once, the gradient written once."""
    n = inp.log_probs.numel()
    lp = inp.log_probs.element_size()
    behaviour = inp.old_log_probs if loss == "ppo_clip" else inp.rollout_logprobs
    return n * (lp + behaviour.element_size() + inp.advantages.element_size() + inp.loss_mask.element_size() + lp)


# -- implementations ----------------------------------------------------------------


def ours(loss: str, aggregation: str, fused: bool) -> Callable[[Inputs], torch.Tensor]:
    fn, options_cls, _ = LOSSES[loss]
    options = options_cls(fused=fused)

    def step(inp: Inputs) -> torch.Tensor:
        inp.log_probs.grad = None
        value, _metrics = fn(inp.log_probs, inp.old_log_probs, inp.advantages, options, inp.loss_mask,
                             inp.rollout_logprobs, aggregation=aggregation, group_ids=inp.group_ids,
                             num_groups=inp.num_groups)
        value.backward()
        return value

    return step


def ray_stub() -> types.ModuleType:
    """Just what skyrl's ppo_utils touches at import and on local registration."""
    ray = types.ModuleType("ray")

    def remote(*args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return lambda obj: obj

    ray.remote = remote
    ray.is_initialized = lambda: False
    return ray


def load_skyrl() -> tuple[object, object] | str:
    """``(ppo_utils, AlgorithmConfig)``, or why SkyRL cannot be used here."""
    try:
        import ray  # noqa: F401
    except ImportError:
        sys.modules["ray"] = ray_stub()
    try:
        from skyrl.backends.skyrl_train.utils import ppo_utils
        from skyrl.train.config import AlgorithmConfig
    except Exception as exc:  # any missing piece of its import chain
        return f"{type(exc).__name__}: {exc}"
    return ppo_utils, AlgorithmConfig


def skyrl(loss: str, aggregation: str, sky: tuple[object, object]) -> Callable[[Inputs], torch.Tensor]:
    ppo_utils, AlgorithmConfig = sky
    name = LOSSES[loss][2]
    cfg = AlgorithmConfig(policy_loss_type=name, loss_reduction=aggregation)
    cfg.dppo.delta_low = cfg.dppo.delta_high = 0.15
    fn = ppo_utils.PolicyLossRegistry.get(name)

    def step(inp: Inputs) -> torch.Tensor:
        inp.log_probs.grad = None
        batch, width = inp.log_probs.shape
        adv = ppo_utils.apply_loss_reduction_to_advantages_minibatch(
            inp.advantages, inp.loss_mask, aggregation, micro_batch_size=batch, max_seq_len=width,
            prompt_boundaries=inp.boundaries)
        value, _metrics = fn(inp.log_probs, inp.old_log_probs, adv, cfg, inp.loss_mask, inp.rollout_logprobs)
        value.backward()
        return value

    return step


# -- measuring ----------------------------------------------------------------------


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_ms(step: Callable[[Inputs], None], sets: list[Inputs], device: str, reps: int, warmup: int) -> float:
    for i in range(warmup):
        step(sets[i % len(sets)])
    sync(device)
    if device == "cuda":
        events = []
        for i in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step(sets[i % len(sets)])
            end.record()
            events.append((start, end))
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in events)
    times = []
    for i in range(reps):
        t0 = time.perf_counter()
        step(sets[i % len(sets)])
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


GPU_HZ = 2.0e9  # H100/H200 boost clock, to size the spin that holds the queue


QUEUED_REPS = 10
"""Calls queued at once: CUDA's launch queue holds about a thousand kernels, and an eager
call launches dozens; past that the host blocks on the queue, not on a sync."""


def time_queued_ms(step: Callable[[Inputs], None], sets: list[Inputs], reps: int, host_ms: float) -> tuple[float, bool]:
    """Device ms per call with the host running ahead; and whether it really did (no sync caught the GPU up)."""
    reps = min(reps, QUEUED_REPS)
    torch.cuda.synchronize()
    spin_ms = host_ms * reps * 2 + 20
    torch.cuda._sleep(int(spin_ms * 1e-3 * GPU_HZ))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(reps):
        step(sets[i % len(sets)])
    ahead = not start.query()  # the spin still runs: every call was queued before the GPU reached the first
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps, ahead


def count_syncs(step: Callable[[Inputs], None], inp: Inputs, device: str) -> int | None:
    if device != "cuda":
        return None
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step(inp)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    return sum("called a synchronizing CUDA operation" in str(w.message) for w in caught)


def peak_mib(step: Callable[[Inputs], None], inp: Inputs, device: str) -> float | None:
    if device == "cuda":
        inp.log_probs.grad = None
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step(inp)
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    if not hasattr(os, "fork"):
        return None
    # CPU: run the call in a forked child and read its peak RSS growth
    import resource

    def grown_kib(call: Callable[[], None]) -> int:
        read, write = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork of a threaded process: the child stays 1-thread
            pid = os.fork()
        if pid == 0:  # child
            os.close(read)
            torch.set_num_threads(1)
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            call()
            os.write(write, str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as f:
            kib = int(f.read() or 0)
        os.waitpid(pid, 0)
        return kib

    inp.log_probs.grad = None
    # what a forked child grows by doing nothing (page copies, allocator arenas) is not the loss's
    baseline = grown_kib(lambda: None)
    return max(grown_kib(lambda: step(inp)) - baseline, 0) / 1024


def copy_bandwidth(device: str) -> float:
    """Bytes per second of a large copy, counting bytes read plus bytes written."""
    n = (256 if device == "cuda" else 32) * 2**20
    src = torch.rand(n, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    sync(device)
    reps = 10
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        seconds = start.elapsed_time(end) / 1e3 / reps
    else:
        t0 = time.perf_counter()
        for _ in range(reps):
            dst.copy_(src)
        seconds = (time.perf_counter() - t0) / reps
    return 2 * src.numel() * src.element_size() / seconds


@dataclass
class Result:
    width: int
    dtype: str
    loss: str
    aggregation: str
    impl: str
    ms: float
    """gpu ms (see the module docstring); on CPU the median wall time"""
    call_ms: float
    host_ahead: bool | None
    tokens: int
    gtok_s: float
    bw_fraction: float
    peak_mib: float | None
    syncs: int | None
    extra: dict = field(default_factory=dict)


def outcome(step: Callable[[Inputs], torch.Tensor], inp: Inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Loss value and gradient of one call, in float64 on the host, for comparing implementations."""
    value = step(inp)
    return value.detach().double().cpu(), inp.log_probs.grad.double().cpu()


def difference(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]) -> dict[str, float]:
    """Relative differences ‖a − b‖ / ‖b‖ of the loss values and of the gradients."""
    def rel(x: torch.Tensor, y: torch.Tensor) -> float:
        return float((x - y).norm() / y.norm().clamp(min=1e-30))
    return {"loss": rel(a[0], b[0]), "grad": rel(a[1], b[1])}


def run_case(impl: str, step, sets, inp_bytes, device, reps, warmup, width, dtype, loss, aggregation) -> Result:
    call_ms = time_ms(step, sets, device, reps, warmup)
    ms, ahead = time_queued_ms(step, sets, reps, call_ms) if device == "cuda" else (call_ms, None)
    tokens = sets[0].log_probs.numel()
    return Result(width, dtype, loss, aggregation, impl, ms, call_ms, ahead, tokens, tokens / ms / 1e6,
                  0.0 if ms == 0 else inp_bytes / (ms / 1e3), peak_mib(step, sets[0], device),
                  count_syncs(step, sets[0], device))


# -- report -------------------------------------------------------------------------


def fmt(x: float | int | None, spec: str) -> str:
    width = int("".join(c for c in spec.split(".")[0] if c.isdigit()) or 0)
    return "-".rjust(width) if x is None else format(x, spec)


def print_table(results: list[Result], impls: list[str], copy_bw: float) -> None:
    by = {(r.width, r.dtype, r.loss, r.aggregation, r.impl): r for r in results}
    for width, dtype in dict.fromkeys((r.width, r.dtype) for r in results):
        tokens = next(r.tokens for r in results if r.width == width and r.dtype == dtype)
        print(f"\n== {tokens / 1e6:.2f}M tokens (width {width}), {dtype} ==")
        head = f"{'loss':<9}{'aggregation':<14}"
        for impl in impls:
            head += f"| {impl + ' gpu ms':>13} {'×base':>5} {'Gtok/s':>6} {'%BW':>5} {'call ms':>7} {'MiB':>6} {'sync':>4} "
        if "skyrl" in impls:
            head += "| skyrl/best gpu, call"
        print(head)
        for loss in LOSSES:
            for agg in AGGREGATIONS:
                line = f"{loss:<9}{agg:<14}"
                best = None
                for impl in impls:
                    r = by.get((width, dtype, loss, agg, impl))
                    if r is None:
                        line += "| " + " " * 54
                        continue
                    base = by.get((width, dtype, "ppo_clip", "token_mean", impl))
                    paced = "*" if r.host_ahead is False else " "
                    line += (f"| {r.ms:>12.3f}{paced} {r.ms / base.ms:>5.2f} {r.gtok_s:>6.2f} "
                             f"{100 * r.bw_fraction / copy_bw:>5.1f} {r.call_ms:>7.3f} {fmt(r.peak_mib, '>6.1f')} "
                             f"{fmt(r.syncs, '>4d')} ")
                    if impl != "skyrl":
                        best = (r.ms, r.call_ms) if best is None else (min(best[0], r.ms), min(best[1], r.call_ms))
                sky = by.get((width, dtype, loss, agg, "skyrl"))
                if sky is not None and best:
                    line += f"| {sky.ms / best[0]:>6.1f}× {sky.call_ms / best[1]:>5.1f}×"
                print(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--batch", type=int, default=64, help="sequences per mini-batch")
    parser.add_argument("--group", type=int, default=8, help="sequences per prompt group")
    parser.add_argument("--widths", default=None, help="padded widths, comma-separated "
                        "(default: 8192,32768,65536 on CUDA: up to 4.2M tokens; 2048,8192 on CPU)")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--impls", default=None, help="eager,fused,skyrl (default: all that run here; "
                        "fused only on CUDA, as compiling for CPU takes minutes)")
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", default=None, help="write every result here")
    args = parser.parse_args(argv)

    device = "cuda" if args.device == "auto" and torch.cuda.is_available() else args.device
    device = "cpu" if device == "auto" else device
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but torch sees no CUDA device")
    widths = [int(w) for w in (args.widths or ("8192,32768,65536" if device == "cuda" else "2048,8192")).split(",")]
    reps = args.reps or (30 if device == "cuda" else 10)
    impls = (args.impls or ("eager,fused,skyrl" if device == "cuda" else "eager,skyrl")).split(",")
    sky = load_skyrl() if "skyrl" in impls else None
    if isinstance(sky, str):
        print(f"SkyRL not available, its column is left out: {sky}")
        impls.remove("skyrl")

    name = torch.cuda.get_device_name() if device == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    copy_bw = copy_bandwidth(device)
    print(f"device: {name}; torch {torch.__version__}; copy bandwidth {copy_bw / 1e9:.0f} GB/s "
          f"(read + write); batch {args.batch} in groups of {args.group}; {reps} reps, median")

    results: list[Result] = []
    for width in widths:
        for dtype_name in args.dtypes.split(","):
            dtype = DTYPES[dtype_name]
            sets = [make_inputs(args.batch, width, args.group, dtype, device, seed) for seed in (0, 1)]
            print(f"width {width} {dtype_name}: {sets[0].log_probs.numel() / 1e6:.2f}M tokens, "
                  f"{100 * sets[0].valid_fraction:.0f}% valid", flush=True)
            for loss in LOSSES:
                for agg in AGGREGATIONS:
                    nbytes = compulsory_bytes(sets[0], loss)
                    outcomes = {}
                    for impl in impls:
                        step = skyrl(loss, agg, sky) if impl == "skyrl" else ours(loss, agg, impl == "fused")
                        result = run_case(impl, step, sets, nbytes, device, reps, args.warmup, width,
                                          dtype_name, loss, agg)
                        outcomes[impl] = outcome(step, sets[0])
                        if impl != "eager" and "eager" in outcomes:
                            result.extra["vs_eager"] = difference(outcomes[impl], outcomes["eager"])
                        results.append(result)
                        print(f"  {loss:<9}{agg:<14}{impl:<6}{result.ms:9.3f} gpu ms {result.call_ms:9.3f} call ms "
                              f"{fmt(result.peak_mib, '8.1f')} MiB  "
                              f"{fmt(result.syncs, '3d')} syncs  {result.extra.get('vs_eager', '')}", flush=True)
            del sets
            if device == "cuda":
                torch.cuda.empty_cache()

    print_table(results, impls, copy_bw)
    if any(r.host_ahead is False for r in results):
        print("* the host could not stay ahead of the GPU (a sync inside the call waited for it): host-paced")
    if "skyrl" in impls:
        print("\nskyrl time / tackroom time, range over losses × aggregations:")
        for width, dtype_name in dict.fromkeys((r.width, r.dtype) for r in results):
            for impl in (i for i in impls if i != "skyrl"):
                pairs = [(r, next(x for x in results if (x.width, x.dtype, x.loss, x.aggregation, x.impl)
                                  == (r.width, r.dtype, r.loss, r.aggregation, "skyrl")))
                         for r in results if (r.width, r.dtype, r.impl) == (width, dtype_name, impl)]
                gpu = [s.ms / r.ms for r, s in pairs]
                call = [s.call_ms / r.call_ms for r, s in pairs]
                print(f"  {pairs[0][0].tokens / 1e6:.2f}M {dtype_name} {impl:<6} gpu {min(gpu):5.1f}–{max(gpu):5.1f}×   "
                      f"call {min(call):4.1f}–{max(call):4.1f}×")
    print("\nlargest relative difference from tackroom eager (‖Δ‖/‖eager‖, loss value / gradient):")
    for impl in impls:
        for dtype_name in args.dtypes.split(","):
            diffs = [r.extra["vs_eager"] for r in results if r.impl == impl and r.dtype == dtype_name
                     and "vs_eager" in r.extra]
            if diffs:
                print(f"  {impl:<6} {dtype_name}: loss {max(d['loss'] for d in diffs):.1e}, "
                      f"grad {max(d['grad'] for d in diffs):.1e}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "device": name, "torch": torch.__version__, "copy_bandwidth": copy_bw, "batch": args.batch,
            "group": args.group, "reps": reps, "results": [asdict(r) for r in results],
        }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
