"""Attention as two small matmuls for decode steps (and bf16 generation prefills), registered with transformers as
``grove_sdpa``.

In a decode step each row has one query token. PyTorch's CPU ``scaled_dot_product_attention`` runs its
flash-attention kernel for it, whose per-call overhead dominates at these sizes: for SmolLM2's
``[64 rows, 3 KV heads × 3 query heads, 1, 64]`` query against 60–110 cached tokens, ``softmax(q kᵀ · scale +
mask) v`` written as two batched matmuls with the softmax in float32 is faster per layer in bf16
(``benchmarks/decode_attention.py``; results in docs/benchmarks.md). Grouped-query heads are folded into the
query length (``[B, H, L, D] → [B, KV, H/KV · L, D]``), so the cached keys and values are read in place, never
repeated per head. A bf16 prefill with a mask (a multi-turn rollout's new tokens against their cached context)
runs the same way, also faster than SDPA there (``benchmarks/multi_turn_rollout.py --precision bf16``; results in
docs/benchmarks.md).

Other no-grad CPU prefills with a mask (fp32, where the matmul form is slower than PyTorch's kernel) call SDPA with
grouped-query heads instead of transformers' per-head copies of the keys and values. ``grove_sdpa`` is
transformers' own ``sdpa`` for every other call (the training forwards, anything with gradients, GPUs); its mask
function is ``sdpa``'s. :func:`use_decode_attention` switches a model that uses ``sdpa`` to it (the rollout engine
does this).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

__all__ = ["IMPLEMENTATION", "decode_attention", "use_decode_attention"]

IMPLEMENTATION = "grove_sdpa"


def decode_attention(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, scale: float) -> Tensor:
    """``softmax(q kᵀ · scale + mask) v``: ``query [B, H, L, D]`` (one token per row in a decode step, several in a
    prefill), ``key``/``value`` ``[B, KV, T, D]`` (``H`` a multiple of ``KV``), ``mask`` boolean (True = attend) or
    additive, broadcastable to ``[B, 1, L, T]``. Returns ``[B, H, L, D]``; the softmax runs in float32. A query
    that may attend to nothing (a left pad's row) gets finite weights instead of NaN: its output is never read,
    and its keys are masked out of every real token's attention."""
    batch, heads, length, dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    grouped = query.reshape(batch, kv_heads, group * length, dim)  # [B, KV, G·L, D]
    scores = torch.matmul(grouped, key.transpose(-1, -2)).float().mul_(scale)  # [B, KV, G·L, T]
    if mask is not None:
        per_query = scores.view(batch, kv_heads, group, length, -1)
        lowest = torch.finfo(torch.float32).min
        if mask.dtype == torch.bool:
            per_query.masked_fill_(~mask[:, :, None], lowest)
        else:
            per_query.add_(mask[:, :, None].float()).clamp_(min=lowest)
    weights = scores.softmax(dim=-1).to(value.dtype)
    return torch.matmul(weights, value).reshape(batch, heads, length, dim)


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
    decode = query.shape[2] == 1
    if not plain or query.shape[1] % key.shape[1]:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    if attention_mask is not None and attention_mask.dim() == 4:  # this call's rows of the mask
        attention_mask = attention_mask[:, :, -query.shape[2] :, : key.shape[2]]
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    generation_prefill = _cpu_generation_prefill(query, attention_mask)
    if decode or (generation_prefill and _matmul_prefill(query, key)):
        out = decode_attention(query, key, value, attention_mask, scale)
    elif generation_prefill:
        # transformers repeats the keys and values per query head whenever a mask is given (three copies of every
        # cached layer for SmolLM2); grouped-query SDPA reads them in place: the same results (0.0 difference) in
        # 0.78-0.93x the time for a rollout's new tokens against their cached context
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, scale=scale, enable_gqa=True)
    else:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    return out.transpose(1, 2).contiguous(), None  # [B, L, H, D], as sdpa_attention_forward returns


def _cpu_generation_prefill(query: Tensor, mask: Tensor | None) -> bool:
    """A several-token query with no autograd on a CPU with an explicit mask: a generation prefill (padded prompts,
    or new tokens against cached ones), or a no-grad log-prob forward. grove routes these itself."""
    return query.device.type == "cpu" and not torch.is_grad_enabled() and mask is not None and mask.dim() == 4


def _matmul_prefill(query: Tensor, key: Tensor) -> bool:
    """Whether such a prefill runs as the two matmuls: in bfloat16, new tokens against cached ones (fewer queries
    than keys). There PyTorch's flash kernel with a mask took twice as long (docs/benchmarks.md, "Agent rollout
    speed"). Not in float32 (the matmul form is slower there), and not without a cache (its ``[L, L]`` scores per
    head grow with the square of the sequence); autograd is ruled out before (it would keep the float32 scores)."""
    return query.dtype == torch.bfloat16 and query.shape[2] < key.shape[2]


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
