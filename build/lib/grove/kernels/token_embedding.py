"""Input token embeddings whose weight gradient is added into ``weight.grad`` in place (one process).

``nn.Embedding``'s backward (``embedding_dense_backward``) builds a zero-filled ``[V, H]`` gradient for every
micro-batch, adds the looked-up rows' gradients into it, and autograd then adds that buffer into ``weight.grad``:
for SmolLM2's 49,152 × 576 float32 embedding, a 113 MB fill and a 113 MB add per micro-batch, whatever the few
hundred tokens it looked up. Without them the fp32 update of the TRL benchmark's batch (8 micro-batches, every
sample computed) is shorter and the bf16 one unchanged (``benchmarks/update_speed.py`` and ``benchmarks/vs_trl.py
--set train.skip_zero_advantage=false``; results in docs/benchmarks.md).

:func:`embed_tokens` returns the same rows (``weight[ids]``), and inside
:func:`grove.kernels.output_projection.accumulating_weight_gradient_in_place` (the single-process update opens it;
the output projection's weight gradient goes the same way) its backward adds each row's gradient straight into
``weight.grad`` (``index_add_``, in index order) and hands autograd ``None`` for the weight: no ``[V, H]`` buffer is
filled or added. ``weight.grad`` receives the same sum in a different order of float additions. Rows looked up at
``padding_idx`` get no gradient, as in ``nn.Embedding``. Outside the block, or for a weight that is not a leaf
(sharded, frozen), it is ``F.embedding`` with its usual backward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from grove.kernels.output_projection import writes_weight_gradient_in_place

__all__ = ["embed_tokens"]


class _InPlaceEmbedding(torch.autograd.Function):
    """``weight[ids]`` whose backward adds into ``weight.grad`` (see the module docstring)."""

    @staticmethod
    def forward(ctx, weight: Tensor, ids: Tensor, padding_idx: int | None) -> Tensor:
        ctx.save_for_backward(ids)
        ctx.weight, ctx.padding_idx = weight, padding_idx
        return F.embedding(ids, weight)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        (ids,) = ctx.saved_tensors
        weight, ctx.weight = ctx.weight, None
        rows, grads = ids.reshape(-1), grad_out.reshape(-1, grad_out.shape[-1])
        if ctx.padding_idx is not None:
            keep = rows != ctx.padding_idx
            rows, grads = rows[keep], grads[keep]
        if weight.grad is None:
            weight.grad = torch.zeros_like(weight)
        weight.grad.index_add_(0, rows, grads.to(weight.grad.dtype))
        return None, None, None


def embed_tokens(weight: Tensor, ids: Tensor, padding_idx: int | None = None) -> Tensor:
    """``[*ids.shape, H]`` rows of ``weight [V, H]``, as ``F.embedding(ids, weight, padding_idx)``; the weight's
    gradient goes into ``weight.grad`` in place where :func:`writes_weight_gradient_in_place` allows it."""
    if torch.is_grad_enabled() and writes_weight_gradient_in_place(weight):
        return _InPlaceEmbedding.apply(weight, ids, padding_idx)
    return F.embedding(ids, weight, padding_idx)
