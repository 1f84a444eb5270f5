"""Mixed precision: bfloat16 autocast around generation and the forward pass, float32 everywhere else.

Weights and AdamW state stay float32 ("master weights"); matmuls run in bfloat16 (fast on CPUs with
AMX/AVX512-BF16 and on GPUs); :func:`grove.core.output_projection.token_logprobs_and_entropy` takes the
log-softmax in float32 and the loss is float32. The rollout-vs-training log-prob mismatch grows
(it is logged every step); ``train.old_logprobs: recompute`` with ``algorithm.rollout_correction``
corrects for it.
"""

from __future__ import annotations

import contextlib

import torch


def autocast(precision: str, device: torch.device | str = "cpu") -> contextlib.AbstractContextManager:
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision == "bf16":
        return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
    raise ValueError(f"unknown precision {precision!r}; use 'fp32' or 'bf16'")
