"""The arithmetic of a supported decoder (:mod:`grove.rollout.decoder_spec`) over a preallocated key/value cache.

:func:`decoder_forward` runs ``L`` new tokens of ``N`` rows through every layer, writes their keys and values into
the cache at the given columns, and returns the final-normed hidden state of each row's last token. It serves the
prefill (``L`` prompt tokens, scaled-dot-product attention) and the decode step (``L = 1``, attention as two batched
matrix products, :func:`grove.rollout.decode_attention.decode_attention`) alike, and is written so that a decode step
is a fixed sequence of kernels on fixed tensors: no host read-back, no shape that depends on values, so it can be
captured as a CUDA graph and replayed.

Each step states transformers' Llama-family forward (``LlamaDecoderLayer`` and its Qwen and Mistral variants): RMSNorm
in float32 then cast back before its weight, ``q·cos + rotate_half(q)·sin`` with the table in the activations'
dtype, residual additions in the activations' dtype, ``down(silu(gate) · up)``. The cache's columns need not be the
positions: a token's position only enters through its rotary angle, and which cached keys it sees is the mask
(``key_valid`` and causality by column), so rows with left pads or reused prefixes share one column layout.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from grove.rollout.decode_attention import decode_attention
from grove.rollout.decode_weights import DecodeWeights, LayerWeights
from grove.rollout.decoder_spec import DecoderSpec
from grove.rollout.rotary_table import RotaryTable

__all__ = ["attention_mask", "decoder_forward", "rms_norm"]


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """``weight · x / sqrt(mean(x²) + eps)``, the statistics in float32 (transformers' ``LlamaRMSNorm``)."""
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def _rotate_half(x: Tensor) -> Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def attention_mask(key_valid: Tensor, columns: Tensor, write_columns: Tensor) -> Tensor:
    """``[N, 1, L, W]`` bool: query ``i`` (written at ``write_columns[i]``) sees column ``j`` when ``key_valid[n, j]``
    and ``j <= write_columns[i]``; every query sees its own column, so a pad's query never attends to nothing (its
    output is never read, and ``key_valid`` hides its key from the real tokens). ``columns``: ``arange(W)``."""
    causal = columns[None, :] <= write_columns[:, None]  # [L, W]
    own = columns[None, :] == write_columns[:, None]
    return ((key_valid[:, None, :] & causal[None]) | own[None]).unsqueeze(1)


def _layer(
    spec: DecoderSpec, w: LayerWeights, h: Tensor, cos: Tensor, sin: Tensor, keys: Tensor, values: Tensor,
    write_columns: Tensor, mask: Tensor,
) -> Tensor:
    rows, length, _ = h.shape
    x = rms_norm(h, w.input_norm, spec.rms_eps)
    q, k, v = F.linear(x, w.qkv, w.qkv_bias).split([spec.q_size, spec.kv_size, spec.kv_size], dim=-1)
    q = q.view(rows, length, spec.heads, spec.head_dim)
    k = k.view(rows, length, spec.kv_heads, spec.head_dim)
    if w.q_norm is not None:
        q, k = rms_norm(q, w.q_norm, spec.rms_eps), rms_norm(k, w.k_norm, spec.rms_eps)
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    v = v.view(rows, length, spec.kv_heads, spec.head_dim).transpose(1, 2)
    q = q * cos + _rotate_half(q) * sin
    k = k * cos + _rotate_half(k) * sin
    keys.index_copy_(2, write_columns, k)
    values.index_copy_(2, write_columns, v)
    if length == 1:
        attended = decode_attention(q, keys, values, mask, spec.scale)
    else:
        attended = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=spec.scale, enable_gqa=True)
    h = h + F.linear(attended.transpose(1, 2).reshape(rows, length, spec.q_size), w.out, w.out_bias)
    x = rms_norm(h, w.post_norm, spec.rms_eps)
    gate, up = F.linear(x, w.gate_up, w.gate_up_bias).chunk(2, dim=-1)
    return h + F.linear(F.silu(gate) * up, w.down, w.down_bias)


def decoder_forward(
    weights: DecodeWeights,
    rotary: RotaryTable,
    token_ids: Tensor,
    positions: Tensor,
    keys: list[Tensor],
    values: list[Tensor],
    write_columns: Tensor,
    mask: Tensor,
) -> Tensor:
    """Run ``token_ids [N, L]`` at ``positions [N, L]`` through the decoder; return the logits ``[N, V]`` of each
    row's last token (float32 with an exact head, else the generation dtype).

    ``keys[l]`` / ``values[l]`` ``[N, KV, W, D]``: layer ``l``'s cache, into whose columns ``write_columns [L]`` the
    new keys and values are written; ``mask`` ``[N, 1, L, W]`` (:func:`attention_mask`)."""
    spec = weights.spec
    h = F.embedding(token_ids, weights.embed)
    cos, sin = rotary.at(positions)
    for layer, k, v in zip(weights.layers, keys, values, strict=True):
        h = _layer(spec, layer, h, cos, sin, k, v, write_columns, mask)
    last = rms_norm(h[:, -1], weights.final_norm, spec.rms_eps)
    head = weights.logits_weight
    return F.linear(last.to(head.dtype), head)
