"""Attention for one-token decode steps as two small matmuls, registered with transformers as ``grove_sdpa``.

In a decode step each row has one query token. PyTorch's CPU ``scaled_dot_product_attention`` runs its
flash-attention kernel for it, whose per-call overhead dominates at these sizes: on the 2-core CPU, for
SmolLM2's ``[64 rows, 3 KV heads × 3 query heads, 1, 64]`` query against 60–110 cached tokens, 0.46–1.16 ms
per layer in bf16 against 0.20–0.40 ms for ``softmax(q kᵀ · scale + mask) v`` written as two batched matmuls
with the softmax in float32 (docs/benchmarks.md, issue 16). Grouped-query heads are folded into the query
length (``[B, H, 1, D] → [B, KV, H/KV, D]``), so the cached keys and values are read in place, never
repeated per head.

``grove_sdpa`` is transformers' own ``sdpa`` for every call with more than one query token (prefill, the
training forwards), and the matmul form above for one-token queries; its mask function is ``sdpa``'s.
:func:`use_decode_attention` switches a model that uses ``sdpa`` to it (the rollout engine does this).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

__all__ = ["IMPLEMENTATION", "decode_attention", "use_decode_attention"]

IMPLEMENTATION = "grove_sdpa"


def decode_attention(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, scale: float) -> Tensor:
    """``softmax(q kᵀ · scale + mask) v`` for one query token per row: ``query [B, H, 1, D]``, ``key``/``value``
    ``[B, KV, T, D]`` (``H`` a multiple of ``KV``), ``mask`` boolean (True = attend) or additive, broadcastable
    to ``[B, 1, 1, T]``. Returns ``[B, H, 1, D]``; the softmax runs in float32."""
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, dim)  # [B, KV, G, D]
    scores = torch.matmul(grouped, key.transpose(-1, -2)).float().mul_(scale)  # [B, KV, G, T]
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill_(~mask, float("-inf"))
        else:
            scores = scores.add_(mask)
    weights = scores.softmax(dim=-1).to(value.dtype)
    return torch.matmul(weights, value).reshape(batch, heads, 1, dim)


def _grove_sdpa(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[Tensor, None]:
    plain = dropout == 0.0 and kwargs.get("position_bias") is None and kwargs.get("softcap") is None
    if query.shape[2] != 1 or not plain or query.shape[1] % key.shape[1]:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    if attention_mask is not None and attention_mask.dim() == 4:
        attention_mask = attention_mask[:, :, -1:, : key.shape[2]]  # this step's row of the mask
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    out = decode_attention(query, key, value, attention_mask, scale)
    return out.transpose(1, 2).contiguous(), None  # [B, 1, H, D], as sdpa_attention_forward returns


AttentionInterface.register(IMPLEMENTATION, _grove_sdpa)
AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)


def use_decode_attention(model: nn.Module) -> bool:
    """Switch ``model`` from ``sdpa`` to ``grove_sdpa`` (identical except one-token queries); other attention
    implementations (eager, flash, flex) are left alone. Returns whether the model now uses it."""
    config = getattr(model, "config", None)
    current = getattr(config, "_attn_implementation", None)
    if current == IMPLEMENTATION:
        return True
    if current != "sdpa" or not hasattr(model, "set_attn_implementation"):
        return False
    model.set_attn_implementation(IMPLEMENTATION)
    return getattr(model.config, "_attn_implementation", None) == IMPLEMENTATION
