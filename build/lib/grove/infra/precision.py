"""Mixed precision: bfloat16 autocast around generation and the forward pass, float32 everywhere else.

Weights and AdamW state stay float32 ("master weights"); matmuls run in bfloat16 (fast on CPUs with
AMX/AVX512-BF16 and on GPUs); :func:`grove.kernels.output_projection.token_logprobs_and_entropy` takes the
log-softmax in float32 and the loss is float32. The rollout-vs-training log-prob mismatch grows
(it is logged every step); ``train.old_logprobs: recompute`` with ``algorithm.rollout_correction``
corrects for it.

bf16 is only fast where the hardware multiplies bf16 natively. On a CPU without oneDNN bf16 kernels (an AVX2-only
x86 CPU) PyTorch falls back to a reference bf16 product, several times slower than float32 per product and per
training step (``benchmarks/roofline.py`` and ``benchmarks/vs_trl.py`` on an AVX2-only CPU; results in
``docs/benchmarks.md``).
:func:`native_bf16_products` answers the question; :func:`slow_bf16_warning` words the warning ``grove train``,
``grove config show`` and ``grove eval`` print for such a run.
"""

from __future__ import annotations

import contextlib

import torch

__all__ = ["autocast", "native_bf16_products", "slow_bf16_warning"]


def autocast(precision: str, device: torch.device | str = "cpu") -> contextlib.AbstractContextManager:
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision == "bf16":
        return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
    raise ValueError(f"unknown precision {precision!r}; use 'fp32' or 'bf16'")


def native_bf16_products(device: torch.device | str) -> bool:
    """Whether bf16 matrix products run on kernels of their own on ``device``, not a slow reference loop.

    CUDA: ``torch.cuda.is_bf16_supported()`` (Ampere and later). CPU: whether oneDNN has bf16 kernels for this CPU
    (AVX512 core, AVX512-BF16, AMX, or Arm's BF16 extension); an AVX2-only x86 CPU has none. Other devices: assumed
    native."""
    device = torch.device(device)
    if device.type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if device.type != "cpu":
        return True
    return _onednn_has_bf16()


def _onednn_has_bf16() -> bool:
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def slow_bf16_warning(precision: str, bf16_generation: bool, device: torch.device | str) -> str | None:
    """The warning for a run that asks for bf16 products where ``device`` has no native ones, else ``None``.

    ``precision``: ``train.precision``; ``bf16_generation``: whether rollouts decode from a bf16 weight copy
    (``rollout.bf16_weights``, which follows the precision when unset)."""
    if (precision != "bf16" and not bf16_generation) or native_bf16_products(device):
        return None
    device = torch.device(device)
    what = "this CPU has no oneDNN bf16 kernels" if device.type == "cpu" else f"{device} has no native bf16"
    if device.type == "cpu":
        what += f" (PyTorch CPU capability: {torch.backends.cpu.get_cpu_capability()})"
    fields = []
    if precision == "bf16":
        fields.append("train.precision: bf16")
    if bf16_generation:
        fields.append("rollout.bf16_weights" + (": true" if precision != "bf16" else " (follows the precision)"))
    fix = "set train.precision: fp32" if precision == "bf16" else "set rollout.bf16_weights: false"
    verb = "ask" if len(fields) > 1 else "asks"
    return (
        f"{' and '.join(fields)} {verb} for bf16 matrix products, but {what}: they run on a reference loop several "
        f"times slower than float32 (measured 6× per product and 13–18× per training step on an AVX2 CPU, "
        f"docs/benchmarks.md). For speed, {fix}; keep bf16 here only to reproduce its numerics."
    )
